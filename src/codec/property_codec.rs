//! Reading and writing MQTT 5 property blocks (spec section 2.2.2), with
//! the table of which packet may carry which property.

use super::properties::{id, Properties};
use super::topic::is_valid_topic_name;
use super::wire::{Counter, Reader, Sink, ENDS_EARLY};
use super::DecodeError;

/// Where a property block sits; each place allows its own properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Connect,
    /// The Will Properties in the CONNECT payload.
    Will,
    Connack,
    Publish,
    /// PUBACK, PUBREC, PUBREL and PUBCOMP.
    Ack,
    Subscribe,
    Suback,
    Unsubscribe,
    Unsuback,
    Disconnect,
    Auth,
}

/// Whether a property may appear in a place (the table of section 2.2.2.2).
/// Unknown identifiers are allowed nowhere.
pub(crate) fn is_allowed(property_id: u8, place: Place) -> bool {
    use Place::*;
    match property_id {
        id::PAYLOAD_FORMAT_INDICATOR
        | id::MESSAGE_EXPIRY_INTERVAL
        | id::CONTENT_TYPE
        | id::RESPONSE_TOPIC
        | id::CORRELATION_DATA => matches!(place, Publish | Will),
        id::SUBSCRIPTION_IDENTIFIER => matches!(place, Publish | Subscribe),
        id::SESSION_EXPIRY_INTERVAL => matches!(place, Connect | Connack | Disconnect),
        id::ASSIGNED_CLIENT_IDENTIFIER
        | id::SERVER_KEEP_ALIVE
        | id::RESPONSE_INFORMATION
        | id::MAXIMUM_QOS
        | id::RETAIN_AVAILABLE
        | id::WILDCARD_SUBSCRIPTION_AVAILABLE
        | id::SUBSCRIPTION_IDENTIFIER_AVAILABLE
        | id::SHARED_SUBSCRIPTION_AVAILABLE => place == Connack,
        id::AUTHENTICATION_METHOD | id::AUTHENTICATION_DATA => {
            matches!(place, Connect | Connack | Auth)
        }
        id::REQUEST_PROBLEM_INFORMATION | id::REQUEST_RESPONSE_INFORMATION => place == Connect,
        id::WILL_DELAY_INTERVAL => place == Will,
        id::SERVER_REFERENCE => matches!(place, Connack | Disconnect),
        id::REASON_STRING => matches!(place, Connack | Ack | Suback | Unsuback | Disconnect | Auth),
        id::RECEIVE_MAXIMUM | id::TOPIC_ALIAS_MAXIMUM | id::MAXIMUM_PACKET_SIZE => {
            matches!(place, Connect | Connack)
        }
        id::TOPIC_ALIAS => place == Publish,
        id::USER_PROPERTY => true,
        _ => false,
    }
}

/// Reads a Property Length and the properties it spans.
pub(crate) fn read_properties(
    reader: &mut Reader,
    place: Place,
) -> Result<Properties, DecodeError> {
    let block_len = reader.varint()?;
    // The block is taken (and so bounds-checked) before anything is read
    // from it; a length past the packet fails here.
    let block_len = usize::try_from(block_len).map_err(|_| ENDS_EARLY)?;
    let block = reader.take(block_len)?;
    let mut block = Reader::new(block);
    let mut properties = Properties::default();
    while !block.is_empty() {
        let property_id = block.u8()?;
        if !is_allowed(property_id, place) {
            return Err(DecodeError::malformed(
                "property not allowed in this packet",
            ));
        }
        read_property(property_id, &mut block, &mut properties, place)?;
    }
    Ok(properties)
}

const DUPLICATE: DecodeError = DecodeError::protocol("property appears more than once");

/// Stores a property that may appear only once.
fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DUPLICATE);
    }
    *slot = Some(value);
    Ok(())
}

/// A Byte property that is a flag: only 0 and 1 are defined.
fn flag(reader: &mut Reader) -> Result<u8, DecodeError> {
    match reader.u8()? {
        value @ (0 | 1) => Ok(value),
        _ => Err(DecodeError::protocol("property value must be 0 or 1")),
    }
}

fn non_zero_u16(reader: &mut Reader, reason: &'static str) -> Result<u16, DecodeError> {
    match reader.u16()? {
        0 => Err(DecodeError::protocol(reason)),
        value => Ok(value),
    }
}

fn string(reader: &mut Reader) -> Result<String, DecodeError> {
    Ok(reader.utf8()?.to_owned())
}

fn binary(reader: &mut Reader) -> Result<Vec<u8>, DecodeError> {
    Ok(reader.binary()?.to_vec())
}

/// Reads the value of one (allowed) property into `properties`.
fn read_property(
    property_id: u8,
    reader: &mut Reader,
    properties: &mut Properties,
    place: Place,
) -> Result<(), DecodeError> {
    let p = properties;
    match property_id {
        id::PAYLOAD_FORMAT_INDICATOR => set_once(&mut p.payload_format_indicator, flag(reader)?),
        id::MESSAGE_EXPIRY_INTERVAL => set_once(&mut p.message_expiry_interval_s, reader.u32()?),
        id::CONTENT_TYPE => set_once(&mut p.content_type, string(reader)?),
        id::RESPONSE_TOPIC => set_once(&mut p.response_topic, response_topic(reader)?),
        id::CORRELATION_DATA => set_once(&mut p.correlation_data, binary(reader)?),
        id::SUBSCRIPTION_IDENTIFIER => read_subscription_identifier(reader, p, place),
        id::SESSION_EXPIRY_INTERVAL => set_once(&mut p.session_expiry_interval_s, reader.u32()?),
        id::ASSIGNED_CLIENT_IDENTIFIER => {
            set_once(&mut p.assigned_client_identifier, string(reader)?)
        }
        id::SERVER_KEEP_ALIVE => set_once(&mut p.server_keep_alive_s, reader.u16()?),
        id::AUTHENTICATION_METHOD => set_once(&mut p.authentication_method, string(reader)?),
        id::AUTHENTICATION_DATA => set_once(&mut p.authentication_data, binary(reader)?),
        id::REQUEST_PROBLEM_INFORMATION => {
            set_once(&mut p.request_problem_information, flag(reader)?)
        }
        id::WILL_DELAY_INTERVAL => set_once(&mut p.will_delay_interval_s, reader.u32()?),
        id::REQUEST_RESPONSE_INFORMATION => {
            set_once(&mut p.request_response_information, flag(reader)?)
        }
        id::RESPONSE_INFORMATION => set_once(&mut p.response_information, string(reader)?),
        id::SERVER_REFERENCE => set_once(&mut p.server_reference, string(reader)?),
        id::REASON_STRING => set_once(&mut p.reason_string, string(reader)?),
        id::RECEIVE_MAXIMUM => set_once(
            &mut p.receive_maximum,
            non_zero_u16(reader, "Receive Maximum is 0")?,
        ),
        id::TOPIC_ALIAS_MAXIMUM => set_once(&mut p.topic_alias_maximum, reader.u16()?),
        id::TOPIC_ALIAS => set_once(
            &mut p.topic_alias,
            non_zero_u16(reader, "Topic Alias is 0")?,
        ),
        id::MAXIMUM_QOS => set_once(&mut p.maximum_qos, flag(reader)?),
        id::RETAIN_AVAILABLE => set_once(&mut p.retain_available, flag(reader)?),
        id::USER_PROPERTY => {
            let pair = (string(reader)?, string(reader)?);
            p.user_properties.push(pair);
            Ok(())
        }
        id::MAXIMUM_PACKET_SIZE => {
            set_once(&mut p.maximum_packet_size, maximum_packet_size(reader)?)
        }
        id::WILDCARD_SUBSCRIPTION_AVAILABLE => {
            set_once(&mut p.wildcard_subscription_available, flag(reader)?)
        }
        id::SUBSCRIPTION_IDENTIFIER_AVAILABLE => {
            set_once(&mut p.subscription_identifier_available, flag(reader)?)
        }
        id::SHARED_SUBSCRIPTION_AVAILABLE => {
            set_once(&mut p.shared_subscription_available, flag(reader)?)
        }
        // `is_allowed` let through only the identifiers above.
        _ => Err(DecodeError::malformed("unknown property")),
    }
}

/// The Response Topic is a Topic Name, so no wildcards (MQTT-3.3.2-14).
fn response_topic(reader: &mut Reader) -> Result<String, DecodeError> {
    let topic = reader.utf8()?;
    if !is_valid_topic_name(topic) {
        return Err(DecodeError::protocol("Response Topic is not a topic name"));
    }
    Ok(topic.to_owned())
}

fn maximum_packet_size(reader: &mut Reader) -> Result<u32, DecodeError> {
    match reader.u32()? {
        0 => Err(DecodeError::protocol("Maximum Packet Size is 0")),
        value => Ok(value),
    }
}

/// Several Subscription Identifiers may come only in a PUBLISH (one per
/// matching subscription); a SUBSCRIBE carries at most one.
fn read_subscription_identifier(
    reader: &mut Reader,
    properties: &mut Properties,
    place: Place,
) -> Result<(), DecodeError> {
    let value = reader.varint()?;
    if value == 0 {
        return Err(DecodeError::protocol("Subscription Identifier is 0"));
    }
    if place != Place::Publish && !properties.subscription_identifiers.is_empty() {
        return Err(DUPLICATE);
    }
    properties.subscription_identifiers.push(value);
    Ok(())
}

/// Writes the Property Length and then the properties. Properties the
/// place may not carry are left out, so that the peer never sees a packet
/// it must reject as malformed.
pub(crate) fn write_properties<S: Sink>(properties: &Properties, place: Place, sink: &mut S) {
    // Most packets carry none: skip walking every field twice.
    if properties.is_empty() {
        sink.put_varint(0);
        return;
    }
    let block_len = properties_len(properties, place);
    sink.put_varint(u32::try_from(block_len).unwrap_or(u32::MAX));
    write_items(properties, place, sink);
}

/// Bytes the properties take, without their Property Length.
pub(crate) fn properties_len(properties: &Properties, place: Place) -> usize {
    let mut counter = Counter::default();
    write_items(properties, place, &mut counter);
    counter.len
}

/// Writes the properties a place allows, one small writer per value type.
fn write_items<S: Sink>(p: &Properties, place: Place, sink: &mut S) {
    let mut out = ItemWriter { place, sink };
    out.byte(id::PAYLOAD_FORMAT_INDICATOR, p.payload_format_indicator);
    out.four(id::MESSAGE_EXPIRY_INTERVAL, p.message_expiry_interval_s);
    out.string(id::CONTENT_TYPE, &p.content_type);
    out.string(id::RESPONSE_TOPIC, &p.response_topic);
    out.binary(id::CORRELATION_DATA, &p.correlation_data);
    out.subscription_identifiers(&p.subscription_identifiers);
    out.four(id::SESSION_EXPIRY_INTERVAL, p.session_expiry_interval_s);
    out.string(
        id::ASSIGNED_CLIENT_IDENTIFIER,
        &p.assigned_client_identifier,
    );
    out.two(id::SERVER_KEEP_ALIVE, p.server_keep_alive_s);
    out.string(id::AUTHENTICATION_METHOD, &p.authentication_method);
    out.binary(id::AUTHENTICATION_DATA, &p.authentication_data);
    out.byte(
        id::REQUEST_PROBLEM_INFORMATION,
        p.request_problem_information,
    );
    out.four(id::WILL_DELAY_INTERVAL, p.will_delay_interval_s);
    out.byte(
        id::REQUEST_RESPONSE_INFORMATION,
        p.request_response_information,
    );
    out.string(id::RESPONSE_INFORMATION, &p.response_information);
    out.string(id::SERVER_REFERENCE, &p.server_reference);
    out.string(id::REASON_STRING, &p.reason_string);
    out.two(id::RECEIVE_MAXIMUM, p.receive_maximum);
    out.two(id::TOPIC_ALIAS_MAXIMUM, p.topic_alias_maximum);
    out.two(id::TOPIC_ALIAS, p.topic_alias);
    out.byte(id::MAXIMUM_QOS, p.maximum_qos);
    out.byte(id::RETAIN_AVAILABLE, p.retain_available);
    out.user_properties(&p.user_properties);
    out.four(id::MAXIMUM_PACKET_SIZE, p.maximum_packet_size);
    out.byte(
        id::WILDCARD_SUBSCRIPTION_AVAILABLE,
        p.wildcard_subscription_available,
    );
    out.byte(
        id::SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        p.subscription_identifier_available,
    );
    out.byte(
        id::SHARED_SUBSCRIPTION_AVAILABLE,
        p.shared_subscription_available,
    );
}

/// Writes identifier + value for properties the place allows.
struct ItemWriter<'s, S: Sink> {
    place: Place,
    sink: &'s mut S,
}

impl<S: Sink> ItemWriter<'_, S> {
    /// Writes the identifier and tells whether to write the value.
    fn start(&mut self, property_id: u8) -> bool {
        let allowed = is_allowed(property_id, self.place);
        if allowed {
            self.sink.put_u8(property_id);
        }
        allowed
    }

    fn byte(&mut self, property_id: u8, value: Option<u8>) {
        if let Some(value) = value {
            if self.start(property_id) {
                self.sink.put_u8(value);
            }
        }
    }

    fn two(&mut self, property_id: u8, value: Option<u16>) {
        if let Some(value) = value {
            if self.start(property_id) {
                self.sink.put_u16(value);
            }
        }
    }

    fn four(&mut self, property_id: u8, value: Option<u32>) {
        if let Some(value) = value {
            if self.start(property_id) {
                self.sink.put_u32(value);
            }
        }
    }

    fn string(&mut self, property_id: u8, value: &Option<String>) {
        if let Some(value) = value {
            if self.start(property_id) {
                self.sink.put_str(value);
            }
        }
    }

    fn binary(&mut self, property_id: u8, value: &Option<Vec<u8>>) {
        if let Some(value) = value {
            if self.start(property_id) {
                self.sink.put_binary(value);
            }
        }
    }

    /// A SUBSCRIBE may carry only one, so only the first is written there.
    fn subscription_identifiers(&mut self, values: &[u32]) {
        let count = match self.place {
            Place::Subscribe => 1,
            _ => values.len(),
        };
        for &value in values.iter().take(count) {
            if self.start(id::SUBSCRIPTION_IDENTIFIER) {
                self.sink.put_varint(value);
            }
        }
    }

    fn user_properties(&mut self, pairs: &[(String, String)]) {
        for (name, value) in pairs {
            if self.start(id::USER_PROPERTY) {
                self.sink.put_str(name);
                self.sink.put_str(value);
            }
        }
    }
}
