//! Every rule the broker refuses by, in one table.
//!
//! A refusal names the rule that was broken. The table gives each its MQTT 5
//! reason code, what a 3.1.1 client gets instead - its protocol has five
//! CONNACK return codes, one SUBACK failure code and no code at all on a
//! PUBACK, PUBREC, UNSUBACK or DISCONNECT - and the Reason String an MQTT 5
//! client that asked for one is sent. A packet the codec could not read is
//! answered with the codec's own code and words, not from this table.

use crate::codec::ReasonCode;

/// What a 3.1.1 client gets for a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V311Answer {
    /// A CONNACK carrying this return code (1 to 5).
    ConnackReturnCode(u8),
    /// A SUBACK carrying 0x80 for the filter.
    SubackFailure,
    /// The connection is closed, nothing acknowledged: the packet that would
    /// carry the answer has no room for a code.
    Close,
}

/// Which packet carries a refusal to an MQTT 5 client, which decides what
/// 3.1.1 can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carrier {
    Connack,
    Suback,
    /// PUBACK, PUBREC, UNSUBACK or DISCONNECT: nothing 3.1.1 can say.
    Other,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub code: ReasonCode,
    pub v311: V311Answer,
    pub reason: &'static str,
}

macro_rules! refusals {
    ($($(#[$doc:meta])* $name:ident = ($code:ident, $carrier:ident, $reason:expr),)+) => {
        /// Why the broker refused something: one variant per rule.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Refusal {
            $($(#[$doc])* $name,)+
        }

        impl Refusal {
            /// Every refusal, in table order.
            pub const ALL: &'static [Refusal] = &[$(Refusal::$name,)+];

            fn row(self) -> (ReasonCode, Carrier, &'static str) {
                match self {
                    $(Refusal::$name => (ReasonCode::$code, Carrier::$carrier, $reason),)+
                }
            }
        }
    };
}

refusals! {
    // At CONNECT, on the CONNACK.
    OnlyMqtt5Admitted = (UNSUPPORTED_PROTOCOL_VERSION, Connack, "this broker admits MQTT 5 clients only"),
    NoAuthenticationMethod = (BAD_AUTHENTICATION_METHOD, Connack, "no enhanced authentication method is offered"),
    ClientIdTooLong = (CLIENT_IDENTIFIER_NOT_VALID, Connack, "client id longer than limits.max_client_id_length"),
    KeptSessionWithoutClientId = (CLIENT_IDENTIFIER_NOT_VALID, Connack, "a session kept past its connection needs a client id"),
    ClientIdControlCharacter = (CLIENT_IDENTIFIER_NOT_VALID, Connack, "client id holds a control character"),
    /// `saguin-bridge/<name>` is a bridge's own session here; a client
    /// taking one would take over the bridge's positions.
    ClientIdReservedForBridges = (CLIENT_IDENTIFIER_NOT_VALID, Connack, "client ids starting saguin-bridge/ are reserved for the broker's bridges"),
    UserNameControlCharacter = (BAD_USER_NAME_OR_PASSWORD, Connack, "user name holds a control character"),
    /// A name that could rewrite the log line recording it names nobody.
    CertificateNameControlCharacter = (BAD_USER_NAME_OR_PASSWORD, Connack, "the client certificate's name holds a control character"),
    /// One answer for an unknown user, a wrong password and a missing one:
    /// telling them apart would tell a caller who exists.
    BadCredentials = (BAD_USER_NAME_OR_PASSWORD, Connack, "bad user name or password"),
    ReservedConnectProperty = (IMPLEMENTATION_SPECIFIC_ERROR, Connack, "saguin- User Properties are reserved"),
    WillTopicNotAName = (TOPIC_NAME_INVALID, Connack, "Will topic holds a wildcard or is empty"),
    WillTopicTooLong = (TOPIC_NAME_INVALID, Connack, "topic longer than limits.max_topic_length"),
    WillTopicTooDeep = (TOPIC_NAME_INVALID, Connack, "topic deeper than limits.max_topic_levels"),
    WillTopicReserved = (TOPIC_NAME_INVALID, Connack, "no topic is defined there in the reserved $saguin/ space"),
    WillTopicShareForm = (TOPIC_NAME_INVALID, Connack, "$share/ is a subscription form, not a topic"),
    WillTopicSysTree = (TOPIC_NAME_INVALID, Connack, "the $SYS tree is not published to by clients"),
    WillTopicDeadLetter = (TOPIC_NAME_INVALID, Connack, "a dead-letter channel takes records only from its queue, never a Will"),
    WillTopicRequest = (TOPIC_NAME_INVALID, Connack, "a Will is not a request: nothing under $saguin/ takes one"),
    WillNoRoom = (QUOTA_EXCEEDED, Connack, "the session store is full and cannot hold the Will"),
    SessionStoreFailedAtConnect = (IMPLEMENTATION_SPECIFIC_ERROR, Connack, "the session store failed; connect again"),
    ServerBusy = (SERVER_BUSY, Connack, "every connection slot is taken"),
    // The acl_file's, at CONNECT.
    ClientIdNotAdmitted = (BAD_USER_NAME_OR_PASSWORD, Connack, "bad user name or password for this client id"),
    WillDenied = (NOT_AUTHORIZED, Connack, "this client's roles take the Will away"),
    WillRetainDenied = (RETAIN_NOT_SUPPORTED, Connack, "this client's roles take retained broadcast values away"),
    WillQos2Denied = (QOS_NOT_SUPPORTED, Connack, "this client's roles take QoS 2 away"),
    WillNotAuthorized = (NOT_AUTHORIZED, Connack, "not authorized to publish to the Will topic"),

    // On a DISCONNECT from the broker.
    AuthWithoutMethod = (PROTOCOL_ERROR, Other, "no authentication method is in use to re-authenticate with"),
    SecondConnect = (PROTOCOL_ERROR, Other, "a second CONNECT"),
    ServerOnlyPacket = (PROTOCOL_ERROR, Other, "a packet only a server sends"),
    KeepAliveExpired = (KEEP_ALIVE_TIMEOUT, Other, "keepalive expired"),
    ShuttingDown = (SERVER_SHUTTING_DOWN, Other, "the broker is stopping"),
    SessionTakenOver = (SESSION_TAKEN_OVER, Other, "another connection took over this client id"),
    ExpiryRevived = (PROTOCOL_ERROR, Other, "session expiry set on DISCONNECT after 0 at CONNECT"),
    SubscriptionIdFromClient = (PROTOCOL_ERROR, Other, "a client's PUBLISH carried a Subscription Identifier"),
    TopicAliasAboveMaximum = (TOPIC_ALIAS_INVALID, Other, "topic alias above the maximum of 16"),
    TopicAliasUnregistered = (PROTOCOL_ERROR, Other, "topic alias not registered on this connection"),
    ReceiveMaximumExceeded = (RECEIVE_MAXIMUM_EXCEEDED, Other, "more unfinished QoS 2 exchanges than Receive Maximum"),
    SessionWritesBehind = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage is behind; too much waits on a session write"),
    ReleaseNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the release could not be stored"),
    OutboundExchangeNotStored = (UNSPECIFIED_ERROR, Other, "the store could not keep the exchange"),
    WindowNotStored = (UNSPECIFIED_ERROR, Other, "the store could not keep the window"),
    SharedNoLocal = (PROTOCOL_ERROR, Other, "No Local on a shared subscription"),
    /// A PUBACK for a QoS 2 delivery, a PUBCOMP where a PUBREC is owed, a
    /// PUBREC for QoS 1: the client's state and the broker's differ.
    AcknowledgementOutOfTurn = (PROTOCOL_ERROR, Other, "an acknowledgement of the wrong kind for the exchange under its packet identifier"),
    RecordTooLarge = (PACKET_TOO_LARGE, Other, "a channel record is larger than your Maximum Packet Size"),
    JobTooLarge = (PACKET_TOO_LARGE, Other, "a queue's job is larger than your Maximum Packet Size"),
    Qos2Denied = (QOS_NOT_SUPPORTED, Other, "QoS 2 publish from a client told Maximum QoS 1"),
    RetainDenied = (RETAIN_NOT_SUPPORTED, Other, "retained broadcast publish from a client whose roles take retained values away"),
    ShareDenied = (SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, Other, "a shared subscription from a client told Shared Subscription Available 0"),
    HangUpNeedsMqtt5 = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "a hang-up is answered on a Response Topic, which 3.1.1 cannot name"),
    HungUp = (ADMINISTRATIVE_ACTION, Other, "hung up by an operator"),

    // On a PUBACK or PUBREC (and a PUBREL's DISCONNECT for the retained store).
    StorageBehind = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage is behind; try again"),
    QueueResponseAtQos2 = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "a queue's response is published at QoS 0 or 1"),
    RetainedStoreFull = (QUOTA_EXCEEDED, Other, "the retained store is full"),
    TopicTooLong = (TOPIC_NAME_INVALID, Other, "topic longer than limits.max_topic_length"),
    TopicTooDeep = (TOPIC_NAME_INVALID, Other, "topic deeper than limits.max_topic_levels"),
    TopicReserved = (TOPIC_NAME_INVALID, Other, "no topic is defined there in the reserved $saguin/ space"),
    TopicShareForm = (TOPIC_NAME_INVALID, Other, "$share/ is a subscription form, not a topic"),
    TopicSysTree = (NOT_AUTHORIZED, Other, "the $SYS tree is not published to by clients"),
    TooManyHeaders = (QUOTA_EXCEEDED, Other, "more User Properties than limits.max_header_count"),
    HeadersTooLarge = (QUOTA_EXCEEDED, Other, "User Properties larger than limits.max_header_bytes"),
    PayloadNotUtf8 = (PAYLOAD_FORMAT_INVALID, Other, "payload is not UTF-8 as its format indicator says"),
    PublishRateExceeded = (QUOTA_EXCEEDED, Other, "publish rate exceeded"),
    InflightExceeded = (QUOTA_EXCEEDED, Other, "inflight allowance exceeded: broker.qos2.max_inflight_per_client"),
    SeekAtQos2 = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "a seek is published at QoS 0 or 1"),
    RetainedProviderFull = (QUOTA_EXCEEDED, Other, "the retained store's provider is full"),
    RetainedNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the retained store could not keep the value"),
    LogNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage could not keep the message for the sessions owed it"),
    ExchangeNoRoom = (QUOTA_EXCEEDED, Other, "the store has no room for the exchange"),
    ExchangeNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the store could not keep the exchange"),
    ExactlyOnceNotCompleted = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage could not complete the exactly-once publish"),
    ChannelFull = (QUOTA_EXCEEDED, Other, "the channel is at its max_bytes"),
    ChannelProviderFull = (QUOTA_EXCEEDED, Other, "the channel's storage is full"),
    StorageUnexpected = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage answered unexpectedly"),
    RecordNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage could not keep the record"),
    DeadLetterPublish = (NOT_AUTHORIZED, Other, "a dead-letter channel takes records only from its queue"),
    ResponseNamesNoQueue = (TOPIC_NAME_INVALID, Other, "that response topic names no queue"),
    SeekNoChannel = (TOPIC_NAME_INVALID, Other, "no channel has that name: a seek moves a durable consumer's position in an append channel"),
    SeekOnQueue = (TOPIC_NAME_INVALID, Other, "that channel is a queue, whose jobs are leased and answered, not read from a position: a seek moves a position in an append channel"),
    SeekOnLatest = (TOPIC_NAME_INVALID, Other, "that channel is a latest channel, which holds each topic's current value, not a log read from a position: a seek moves a position in an append channel"),
    SeekBelowFloor = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "seek refused: below the channel's floor"),
    SeekBeyondEnd = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "seek refused: beyond the channel's next offset"),
    SeekNoSession = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "seek refused: no durable session to move"),
    SeekMalformed = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "seek refused: the payload is not an offset, a duration or an RFC 3339 time"),
    SeekNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "seek refused: the position could not be stored"),
    RequestAtQos2 = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "a request under $saguin/ is published at QoS 1, to be answered on its PUBACK"),
    RequestWithoutResponseTopic = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "no Response Topic: the answer would have nowhere to go"),
    CatalogueNameHasLevels = (TOPIC_NAME_INVALID, Other, "a channel's name is one topic level: this names no channel that could exist"),
    KeyNotUtf8 = (TOPIC_NAME_INVALID, Other, "the key is not a topic: it is not UTF-8"),
    KeyEmpty = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the key is empty: the payload is the topic to read"),
    KeyTooLong = (TOPIC_NAME_INVALID, Other, "the key is longer than limits.max_topic_length"),
    KeyTooDeep = (TOPIC_NAME_INVALID, Other, "the key is deeper than limits.max_topic_levels"),
    KeyHasWildcard = (TOPIC_NAME_INVALID, Other, "the key holds a wildcard: a point read reads one topic, and a subscription reads many"),
    KeyReserved = (TOPIC_NAME_INVALID, Other, "the key is in a reserved space, where no channel holds a value"),
    KeyUnclaimed = (TOPIC_NAME_INVALID, Other, "no channel claims the key: it is a broadcast topic, which holds no value"),
    KeyOnQueue = (TOPIC_NAME_INVALID, Other, "the key is on a queue, which holds work for one worker rather than values"),
    KeyOnAppend = (TOPIC_NAME_INVALID, Other, "the key is on an append channel, a log rather than a set of values: read it by subscribing"),
    ValueNotRead = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "storage could not read the value"),
    AnswerTooLarge = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the answer is larger than your Maximum Packet Size"),
    PublishNotAuthorized = (NOT_AUTHORIZED, Other, "not authorized: no rule of this client's roles allows this publish"),
    HangUpWithoutResponseTopic = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "no Response Topic: nobody would be told what happened, so nobody is hung up"),
    HangUpNamesNobody = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the payload is the client id to hang up, and names none"),
    HangUpSelf = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "a client cannot hang itself up: it sends DISCONNECT"),

    // On a SUBACK, per filter.
    ReservedSubscribeProperty = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "a saguin- User Property this broker does not read"),
    ShareMalformed = (TOPIC_FILTER_INVALID, Suback, "a shared subscription is $share/<name>/<filter>"),
    ShareCase = (TOPIC_FILTER_INVALID, Suback, "$share is written in lower case"),
    WildcardPartLevel = (TOPIC_FILTER_INVALID, Suback, "a wildcard takes less than a whole level"),
    FilterTooDeep = (TOPIC_FILTER_INVALID, Suback, "filter deeper than limits.max_topic_levels"),
    FilterSysTree = (NOT_AUTHORIZED, Suback, "this broker publishes nothing under $SYS"),
    FilterReserved = (NOT_AUTHORIZED, Suback, "nothing is delivered on that $saguin/ topic"),
    SliceNotACall = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter is not a call: its form is topic_hash(<partitions>, <index>)"),
    SliceUnknownFunction = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter names a function this broker does not have: the only one is topic_hash(<partitions>, <index>), in lower case"),
    SliceArgumentCount = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter's topic_hash takes two arguments: topic_hash(<partitions>, <index>)"),
    SliceArgumentNotDigits = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "a saguin-filter argument is not a number: write decimal digits 0-9 only, with no sign, prefix or exponent"),
    SliceArgumentTooLarge = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "a saguin-filter argument is above 2147483647, the largest partition count"),
    SlicePartitionsZero = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter's partition count is 0: topic_hash(<partitions>, <index>) needs 1 or more"),
    SliceIndexOutOfRange = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter's index is not below its partition count: topic_hash(<partitions>, <index>), index 0 to partitions - 1"),
    SliceCountsDiffer = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "every saguin-filter on one SUBSCRIBE must name the same partition count"),
    SliceOnShared = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter is refused on $share/: a shared subscription already divides its stream"),
    SliceOnQueue = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "saguin-filter is refused on $saguin/queue/: a queue already divides its work"),
    TooManySubscriptions = (QUOTA_EXCEEDED, Suback, "more filters than limits.max_subscriptions"),
    TooManySharedGroups = (QUOTA_EXCEEDED, Suback, "a new shared group past limits.max_shared_groups; joining a group already held is allowed"),
    NotAQueueForm = (TOPIC_FILTER_INVALID, Suback, "not a queue's form: a worker subscribes to $saguin/queue/<name>, naming a queue exactly"),
    QueueNeedsMqtt5 = (TOPIC_FILTER_INVALID, Suback, "a queue is consumed over MQTT 5 only: a job is answered with its Response Topic and Correlation Data"),
    QueueNoLocal = (TOPIC_FILTER_INVALID, Suback, "No Local on a queue's form would withhold a worker's own jobs from it for ever; subscribe without it"),
    QueueAtQos0 = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "a queue's form is subscribed at QoS 1: its lease starts at the PUBACK"),
    FilterInsideQueue = (TOPIC_FILTER_INVALID, Suback, "that filter lies inside a queue, whose jobs are taken only through $saguin/queue/<name>"),
    SessionStoreFullAtSubscribe = (QUOTA_EXCEEDED, Suback, "the session store is full; the session is kept as it was"),
    SessionStoreFailedAtSubscribe = (IMPLEMENTATION_SPECIFIC_ERROR, Suback, "the session store failed; the session is kept as it was"),
    SubscribeNotAuthorized = (NOT_AUTHORIZED, Suback, "not authorized: no rule of this client's roles allows this subscription"),
    /// A 3.1.1 client, which no CONNACK could tell, asking for a shared
    /// subscription its roles take away; MQTT 5 is closed `0x9E` instead.
    ShareNotAllowed = (NOT_AUTHORIZED, Suback, "this client's roles take shared subscriptions away"),
    /// Inside `$share/`, the reserved space is refused as a grant would be:
    /// a seek's reply and a queue's jobs go to one client, never a group.
    FilterReservedShared = (NOT_AUTHORIZED, Suback, "a shared subscription is delivered nothing under $saguin/"),

    // On an UNSUBACK to MQTT 5; a 3.1.1 connection is closed.
    UnsubscribeNotStored = (IMPLEMENTATION_SPECIFIC_ERROR, Other, "the session store failed; the filters stay subscribed"),
}

impl Refusal {
    /// The rule's row: its reason code, 3.1.1 answer and Reason String.
    pub fn rule(self) -> Rule {
        let (code, carrier, reason) = self.row();
        let v311 = match carrier {
            Carrier::Connack => V311Answer::ConnackReturnCode(code.connack_return_code_v311()),
            Carrier::Suback => V311Answer::SubackFailure,
            Carrier::Other => V311Answer::Close,
        };
        Rule { code, v311, reason }
    }

    pub fn code(self) -> ReasonCode {
        self.row().0
    }

    /// The Reason String, and what the log says.
    pub fn reason(self) -> &'static str {
        self.row().2
    }

    /// The code a SUBACK carries for this refusal in `version`.
    pub fn suback_code(self, version: crate::codec::ProtocolVersion) -> ReasonCode {
        match (version, self.rule().v311) {
            (crate::codec::ProtocolVersion::V311, V311Answer::SubackFailure) => {
                ReasonCode::UNSPECIFIED_ERROR
            }
            _ => self.code(),
        }
    }

    /// Whether a DISCONNECT for this ends a connection because its client
    /// broke a rule, as `saguin_connections_refused_total` counts: the
    /// broker stopping and a takeover are not refusals of anybody.
    pub fn ends_for_a_rule(self) -> bool {
        !matches!(self, Refusal::ShuttingDown | Refusal::SessionTakenOver)
    }

    /// A Will's topic refused by the rule a publish to it would meet: the
    /// CONNACK says the topic name is what is wrong.
    pub fn for_will(self) -> Refusal {
        match self {
            Refusal::TopicTooLong => Refusal::WillTopicTooLong,
            Refusal::TopicTooDeep => Refusal::WillTopicTooDeep,
            Refusal::TopicReserved => Refusal::WillTopicReserved,
            Refusal::TopicShareForm => Refusal::WillTopicShareForm,
            Refusal::TopicSysTree => Refusal::WillTopicSysTree,
            other => other,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes the reference's reason-code table allows on each packet.
    const ON_CONNACK: &[u8] = &[
        0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x89, 0x8C, 0x90, 0x97, 0x9A, 0x9B,
    ];
    const ON_SUBACK: &[u8] = &[0x83, 0x87, 0x8F, 0x97];
    const ON_OTHER: &[u8] = &[
        0x80, 0x82, 0x83, 0x87, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94, 0x95, 0x97, 0x98, 0x99,
        0x9A, 0x9B, 0x9E,
    ];

    #[test]
    fn every_refusal_has_an_error_code_a_3_1_1_answer_and_words() {
        for &refusal in Refusal::ALL {
            let rule = refusal.rule();
            assert!(rule.code.is_error(), "{refusal:?} is not an error code");
            assert!(!rule.reason.is_empty(), "{refusal:?} has no Reason String");
            assert_eq!(rule.code, refusal.code());
            assert_eq!(rule.reason, refusal.reason());
            let (_, carrier, _) = refusal.row();
            let allowed = match carrier {
                Carrier::Connack => ON_CONNACK,
                Carrier::Suback => ON_SUBACK,
                Carrier::Other => ON_OTHER,
            };
            assert!(
                allowed.contains(&rule.code.0),
                "{refusal:?}: 0x{:02X} is not a code its packet carries",
                rule.code.0
            );
            match rule.v311 {
                V311Answer::ConnackReturnCode(code) => {
                    assert!((1..=5).contains(&code), "{refusal:?}: return code {code}");
                    assert_eq!(carrier, Carrier::Connack);
                }
                V311Answer::SubackFailure => assert_eq!(carrier, Carrier::Suback),
                V311Answer::Close => assert_eq!(carrier, Carrier::Other),
            }
        }
    }

    #[test]
    fn the_table_names_each_rule_once() {
        for (i, a) in Refusal::ALL.iter().enumerate() {
            for b in &Refusal::ALL[i + 1..] {
                assert_ne!(a, b);
                // Two rows with one code and one text would be one rule; the
                // Will's rows share words with a publish's but not a packet.
                assert!(
                    a.row() != b.row(),
                    "{a:?} and {b:?} are the same rule twice"
                );
            }
        }
    }

    #[test]
    fn connack_refusals_map_as_the_reference_says() {
        let expect = [
            (Refusal::OnlyMqtt5Admitted, 0x01),
            (Refusal::ClientIdTooLong, 0x02),
            (Refusal::KeptSessionWithoutClientId, 0x02),
            (Refusal::ClientIdControlCharacter, 0x02),
            (Refusal::SessionStoreFailedAtConnect, 0x03),
            (Refusal::ServerBusy, 0x03),
            (Refusal::ReservedConnectProperty, 0x03),
            (Refusal::UserNameControlCharacter, 0x04),
            (Refusal::CertificateNameControlCharacter, 0x04),
            (Refusal::WillTopicNotAName, 0x05),
            (Refusal::WillTopicSysTree, 0x05),
            (Refusal::WillNoRoom, 0x05),
            (Refusal::ClientIdNotAdmitted, 0x04),
            (Refusal::WillDenied, 0x05),
            (Refusal::WillRetainDenied, 0x05),
        ];
        for (refusal, code) in expect {
            assert_eq!(refusal.rule().v311, V311Answer::ConnackReturnCode(code));
        }
    }

    #[test]
    fn publish_refusals_close_a_3_1_1_connection_and_subscribe_ones_answer_0x80() {
        use crate::codec::ProtocolVersion::{V311, V5};
        assert_eq!(Refusal::ChannelFull.rule().v311, V311Answer::Close);
        assert_eq!(Refusal::StorageBehind.rule().v311, V311Answer::Close);
        assert_eq!(Refusal::TooManySubscriptions.suback_code(V311).0, 0x80);
        assert_eq!(Refusal::TooManySubscriptions.suback_code(V5).0, 0x97);
        // The Will's topic rules answer 0x90 where a publish's $SYS is 0x87.
        assert_eq!(Refusal::TopicSysTree.code().0, 0x87);
        assert_eq!(Refusal::TopicSysTree.for_will().code().0, 0x90);
        assert_eq!(Refusal::TopicTooLong.for_will().code().0, 0x90);
    }
}
