//! MQTT 5 properties.
//!
//! One struct holds every property; which ones a packet may carry is checked
//! when decoding (a property a packet may not carry is a malformed packet).

/// Property identifiers (MQTT 5 section 2.2.2.2).
pub mod id {
    pub const PAYLOAD_FORMAT_INDICATOR: u8 = 0x01;
    pub const MESSAGE_EXPIRY_INTERVAL: u8 = 0x02;
    pub const CONTENT_TYPE: u8 = 0x03;
    pub const RESPONSE_TOPIC: u8 = 0x08;
    pub const CORRELATION_DATA: u8 = 0x09;
    pub const SUBSCRIPTION_IDENTIFIER: u8 = 0x0B;
    pub const SESSION_EXPIRY_INTERVAL: u8 = 0x11;
    pub const ASSIGNED_CLIENT_IDENTIFIER: u8 = 0x12;
    pub const SERVER_KEEP_ALIVE: u8 = 0x13;
    pub const AUTHENTICATION_METHOD: u8 = 0x15;
    pub const AUTHENTICATION_DATA: u8 = 0x16;
    pub const REQUEST_PROBLEM_INFORMATION: u8 = 0x17;
    pub const WILL_DELAY_INTERVAL: u8 = 0x18;
    pub const REQUEST_RESPONSE_INFORMATION: u8 = 0x19;
    pub const RESPONSE_INFORMATION: u8 = 0x1A;
    pub const SERVER_REFERENCE: u8 = 0x1C;
    pub const REASON_STRING: u8 = 0x1F;
    pub const RECEIVE_MAXIMUM: u8 = 0x21;
    pub const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
    pub const TOPIC_ALIAS: u8 = 0x23;
    pub const MAXIMUM_QOS: u8 = 0x24;
    pub const RETAIN_AVAILABLE: u8 = 0x25;
    pub const USER_PROPERTY: u8 = 0x26;
    pub const MAXIMUM_PACKET_SIZE: u8 = 0x27;
    pub const WILDCARD_SUBSCRIPTION_AVAILABLE: u8 = 0x28;
    pub const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u8 = 0x29;
    pub const SHARED_SUBSCRIPTION_AVAILABLE: u8 = 0x2A;
}

/// Every MQTT 5 property. `None` / empty means absent on the wire.
///
/// `subscription_identifiers` may hold several values only on a PUBLISH
/// sent by the server; `user_properties` keeps the order it arrived in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Properties {
    pub payload_format_indicator: Option<u8>,
    pub message_expiry_interval_s: Option<u32>,
    pub content_type: Option<String>,
    pub response_topic: Option<String>,
    pub correlation_data: Option<Vec<u8>>,
    pub subscription_identifiers: Vec<u32>,
    pub session_expiry_interval_s: Option<u32>,
    pub assigned_client_identifier: Option<String>,
    pub server_keep_alive_s: Option<u16>,
    pub authentication_method: Option<String>,
    pub authentication_data: Option<Vec<u8>>,
    pub request_problem_information: Option<u8>,
    pub will_delay_interval_s: Option<u32>,
    pub request_response_information: Option<u8>,
    pub response_information: Option<String>,
    pub server_reference: Option<String>,
    pub reason_string: Option<String>,
    pub receive_maximum: Option<u16>,
    pub topic_alias_maximum: Option<u16>,
    pub topic_alias: Option<u16>,
    pub maximum_qos: Option<u8>,
    pub retain_available: Option<u8>,
    pub user_properties: Vec<(String, String)>,
    pub maximum_packet_size: Option<u32>,
    pub wildcard_subscription_available: Option<u8>,
    pub subscription_identifier_available: Option<u8>,
    pub shared_subscription_available: Option<u8>,
}

impl Properties {
    /// Checked on every publish, so field by field rather than against a
    /// built default; the pattern names every field, so a new one cannot
    /// be forgotten here.
    pub fn is_empty(&self) -> bool {
        let Properties {
            payload_format_indicator,
            message_expiry_interval_s,
            content_type,
            response_topic,
            correlation_data,
            subscription_identifiers,
            session_expiry_interval_s,
            assigned_client_identifier,
            server_keep_alive_s,
            authentication_method,
            authentication_data,
            request_problem_information,
            will_delay_interval_s,
            request_response_information,
            response_information,
            server_reference,
            reason_string,
            receive_maximum,
            topic_alias_maximum,
            topic_alias,
            maximum_qos,
            retain_available,
            user_properties,
            maximum_packet_size,
            wildcard_subscription_available,
            subscription_identifier_available,
            shared_subscription_available,
        } = self;
        payload_format_indicator.is_none()
            && message_expiry_interval_s.is_none()
            && content_type.is_none()
            && response_topic.is_none()
            && correlation_data.is_none()
            && subscription_identifiers.is_empty()
            && session_expiry_interval_s.is_none()
            && assigned_client_identifier.is_none()
            && server_keep_alive_s.is_none()
            && authentication_method.is_none()
            && authentication_data.is_none()
            && request_problem_information.is_none()
            && will_delay_interval_s.is_none()
            && request_response_information.is_none()
            && response_information.is_none()
            && server_reference.is_none()
            && reason_string.is_none()
            && receive_maximum.is_none()
            && topic_alias_maximum.is_none()
            && topic_alias.is_none()
            && maximum_qos.is_none()
            && retain_available.is_none()
            && user_properties.is_empty()
            && maximum_packet_size.is_none()
            && wildcard_subscription_available.is_none()
            && subscription_identifier_available.is_none()
            && shared_subscription_available.is_none()
    }
}
