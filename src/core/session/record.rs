//! The byte form of a session record: what the session provider keeps for
//! a client id whose session outlives its connection.
//!
//! Little-endian, every variable-length field a `u32` length and its bytes
//! (the store's own [`Encoder`]/[`Decoder`]), led by a format byte so a
//! later edition can read an older record. Times are Unix milliseconds, 0
//! meaning "none": a record is read by a broker whose clock started later.

use crate::codec::{Properties, QoS, RetainHandling, SubscriptionOptions, Will};
use crate::core::partition::Slice;
use crate::store::encoding::{DecodeError, Decoded, Decoder, Encoder};

/// Format 2 adds each subscription's declared slice; format 1 records are
/// still read, as subscriptions that declared none.
const FORMAT: u8 = 2;
const FORMAT_WITHOUT_SLICES: u8 = 1;

/// One subscription as the record keeps it: the filter as the client wrote
/// it (a shared one with its `$share/<name>/` prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSubscription {
    pub filter: String,
    pub options: SubscriptionOptions,
    pub subscription_id: Option<u32>,
    /// The slice its SUBSCRIBE declared: a resumed session keeps it.
    pub slice: Option<Slice>,
}

/// A Will as the record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWill {
    pub will: Will,
    /// The user name its CONNECT carried: the Will is judged as that
    /// client when it fires.
    pub user_name: Option<String>,
    /// When it falls due, once its wait has begun; `None` while its
    /// connection was up when the record was written.
    pub due_unix_ms: Option<u64>,
}

/// Everything a session keeps across a restart, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The granted Session Expiry Interval; `u32::MAX` never expires.
    pub expiry_interval_s: u32,
    /// When its connection ended; `None` while it was connected when the
    /// record was written (a stop that cut it leaves it so).
    pub disconnected_unix_ms: Option<u64>,
    pub subscriptions: Vec<StoredSubscription>,
    pub will: Option<StoredWill>,
}

fn options_bits(o: &SubscriptionOptions) -> u8 {
    o.qos as u8
        | u8::from(o.no_local) << 2
        | u8::from(o.retain_as_published) << 3
        | (o.retain_handling as u8) << 4
}

fn options_from_bits(bits: u8) -> Decoded<SubscriptionOptions> {
    let qos = QoS::from_bits(bits & 0b11)
        .ok_or_else(|| DecodeError("a subscription's QoS is 3".into()))?;
    let retain_handling = match (bits >> 4) & 0b11 {
        0 => RetainHandling::SendAlways,
        1 => RetainHandling::SendIfNew,
        2 => RetainHandling::DoNotSend,
        _ => return Err(DecodeError("a subscription's Retain Handling is 3".into())),
    };
    Ok(SubscriptionOptions {
        qos,
        no_local: bits & (1 << 2) != 0,
        retain_as_published: bits & (1 << 3) != 0,
        retain_handling,
    })
}

fn optional_str(e: &mut Encoder, v: &Option<String>) {
    e.u8(u8::from(v.is_some()));
    if let Some(v) = v {
        e.str(v);
    }
}

fn read_optional_str(d: &mut Decoder<'_>, what: &str) -> Decoded<Option<String>> {
    Ok(match d.u8(what)? {
        0 => None,
        _ => Some(d.string(what)?),
    })
}

fn optional_u64(v: Option<u64>) -> u64 {
    v.unwrap_or(0)
}

fn read_optional_u64(d: &mut Decoder<'_>, what: &str) -> Decoded<Option<u64>> {
    Ok(Some(d.u64(what)?).filter(|&v| v != 0))
}

/// A partition count (0 for no declaration) and its indices.
fn encode_slice(slice: Option<&Slice>, e: &mut Encoder) {
    let Some(slice) = slice else {
        e.u32(0);
        return;
    };
    e.u32(slice.partitions());
    e.u32(slice.indices().len() as u32);
    for &index in slice.indices() {
        e.u32(index);
    }
}

fn decode_slice(d: &mut Decoder<'_>) -> Decoded<Option<Slice>> {
    let partitions = d.u32("a slice's partition count")?;
    if partitions == 0 {
        return Ok(None);
    }
    let count = d.count("a slice's indices", 4)?;
    let mut indices = Vec::with_capacity(count);
    for _ in 0..count {
        indices.push(d.u32("a slice's index")?);
    }
    Slice::new(partitions, &indices)
        .map(Some)
        .ok_or_else(|| DecodeError("a slice's index is not below its partition count".into()))
}

fn encode_will(w: &StoredWill, e: &mut Encoder) {
    let will = &w.will;
    let p = &will.properties;
    e.str(&will.topic);
    e.bytes(&will.payload);
    e.u8(will.qos as u8 | u8::from(will.retain) << 2);
    e.u32(p.will_delay_interval_s.unwrap_or(0));
    e.u32(
        p.message_expiry_interval_s
            .map_or(0, |s| s.saturating_add(1)),
    );
    e.u8(p
        .payload_format_indicator
        .map_or(0, |v| v.saturating_add(1)));
    optional_str(e, &p.content_type);
    optional_str(e, &p.response_topic);
    e.u8(u8::from(p.correlation_data.is_some()));
    if let Some(data) = &p.correlation_data {
        e.bytes(data);
    }
    e.u32(p.user_properties.len() as u32);
    for (name, value) in &p.user_properties {
        e.str(name);
        e.str(value);
    }
    optional_str(e, &w.user_name);
    e.u64(optional_u64(w.due_unix_ms));
}

fn decode_will(d: &mut Decoder<'_>) -> Decoded<StoredWill> {
    let topic = d.string("the Will topic")?;
    let payload = d.bytes("the Will payload")?.to_vec();
    let flags = d.u8("the Will flags")?;
    let qos =
        QoS::from_bits(flags & 0b11).ok_or_else(|| DecodeError("the Will's QoS is 3".into()))?;
    let delay_s = d.u32("the Will Delay Interval")?;
    let expiry = d.u32("the Will's Message Expiry Interval")?;
    let format = d.u8("the Will's Payload Format Indicator")?;
    let content_type = read_optional_str(d, "the Will's Content Type")?;
    let response_topic = read_optional_str(d, "the Will's Response Topic")?;
    let correlation_data = match d.u8("the Will's Correlation Data flag")? {
        0 => None,
        _ => Some(d.bytes("the Will's Correlation Data")?.to_vec()),
    };
    let count = d.count("the Will's User Properties", 8)?;
    let mut user_properties = Vec::with_capacity(count);
    for _ in 0..count {
        let name = d.string("a Will User Property name")?;
        let value = d.string("a Will User Property value")?;
        user_properties.push((name, value));
    }
    let user_name = read_optional_str(d, "the Will's user name")?;
    let due_unix_ms = read_optional_u64(d, "the Will's due moment")?;
    Ok(StoredWill {
        will: Will {
            topic,
            payload,
            qos,
            retain: flags & (1 << 2) != 0,
            properties: Properties {
                will_delay_interval_s: Some(delay_s).filter(|&s| s != 0),
                message_expiry_interval_s: expiry.checked_sub(1),
                payload_format_indicator: format.checked_sub(1),
                content_type,
                response_topic,
                correlation_data,
                user_properties,
                ..Properties::default()
            },
        },
        user_name,
        due_unix_ms,
    })
}

impl SessionRecord {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = Encoder::with_capacity(64);
        e.u8(FORMAT);
        e.u32(self.expiry_interval_s);
        e.u64(optional_u64(self.disconnected_unix_ms));
        e.u32(self.subscriptions.len() as u32);
        for s in &self.subscriptions {
            e.str(&s.filter);
            e.u8(options_bits(&s.options));
            // Subscription Identifiers start at 1, so 0 is free for none.
            e.u32(s.subscription_id.unwrap_or(0));
            encode_slice(s.slice.as_ref(), &mut e);
        }
        e.u8(u8::from(self.will.is_some()));
        if let Some(will) = &self.will {
            encode_will(will, &mut e);
        }
        e.buf
    }

    pub fn from_bytes(bytes: &[u8]) -> Decoded<SessionRecord> {
        let mut d = Decoder::new(bytes);
        let format = d.u8("the record format")?;
        if format != FORMAT && format != FORMAT_WITHOUT_SLICES {
            return Err(DecodeError(format!(
                "session record format {format} is not one this broker reads"
            )));
        }
        let expiry_interval_s = d.u32("the session expiry")?;
        let disconnected_unix_ms = read_optional_u64(&mut d, "the disconnect moment")?;
        let count = d.count("the subscriptions", 9)?;
        let mut subscriptions = Vec::with_capacity(count);
        for _ in 0..count {
            let filter = d.string("a subscription filter")?;
            let options = options_from_bits(d.u8("a subscription's options")?)?;
            let id = d.u32("a Subscription Identifier")?;
            let slice = match format {
                FORMAT_WITHOUT_SLICES => None,
                _ => decode_slice(&mut d)?,
            };
            subscriptions.push(StoredSubscription {
                filter,
                options,
                subscription_id: Some(id).filter(|&id| id != 0),
                slice,
            });
        }
        let will = match d.u8("the Will flag")? {
            0 => None,
            _ => Some(decode_will(&mut d)?),
        };
        d.finish("a session record")?;
        Ok(SessionRecord {
            expiry_interval_s,
            disconnected_unix_ms,
            subscriptions,
            will,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> SessionRecord {
        SessionRecord {
            expiry_interval_s: 3600,
            disconnected_unix_ms: Some(1_700_000_000_000),
            subscriptions: vec![
                StoredSubscription {
                    filter: "a/+/c".into(),
                    options: SubscriptionOptions {
                        qos: QoS::ExactlyOnce,
                        no_local: true,
                        retain_as_published: true,
                        retain_handling: RetainHandling::DoNotSend,
                    },
                    subscription_id: Some(268_435_455),
                    slice: Slice::new(8, &[5, 1]),
                },
                StoredSubscription {
                    filter: "$share/g/x/#".into(),
                    options: SubscriptionOptions {
                        qos: QoS::AtLeastOnce,
                        ..SubscriptionOptions::default()
                    },
                    subscription_id: None,
                    slice: None,
                },
            ],
            will: Some(StoredWill {
                will: Will {
                    topic: "dead/device".into(),
                    payload: b"gone".to_vec(),
                    qos: QoS::AtLeastOnce,
                    retain: true,
                    properties: Properties {
                        will_delay_interval_s: Some(30),
                        message_expiry_interval_s: Some(0),
                        payload_format_indicator: Some(1),
                        content_type: Some("text/plain".into()),
                        response_topic: Some("r".into()),
                        correlation_data: Some(vec![0, 1, 2]),
                        user_properties: vec![("k".into(), "v".into())],
                        ..Properties::default()
                    },
                },
                user_name: Some("device-7".into()),
                due_unix_ms: Some(1_700_000_030_000),
            }),
        }
    }

    #[test]
    fn records_round_trip() {
        for record in [
            full(),
            SessionRecord {
                expiry_interval_s: u32::MAX,
                disconnected_unix_ms: None,
                subscriptions: Vec::new(),
                will: None,
            },
        ] {
            let bytes = record.to_bytes();
            assert_eq!(SessionRecord::from_bytes(&bytes).unwrap(), record);
        }
    }

    #[test]
    fn a_damaged_record_is_refused_never_read_as_something_else() {
        let bytes = full().to_bytes();
        for len in 0..bytes.len() {
            assert!(
                SessionRecord::from_bytes(&bytes[..len]).is_err(),
                "{len} bytes read as a record"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(SessionRecord::from_bytes(&longer).is_err());
        let mut other_format = bytes;
        other_format[0] = 9;
        assert!(SessionRecord::from_bytes(&other_format).is_err());
    }

    #[test]
    fn a_record_written_before_slices_reads_as_declaring_none() {
        let mut e = Encoder::with_capacity(32);
        e.u8(FORMAT_WITHOUT_SLICES);
        e.u32(60);
        e.u64(0);
        e.u32(1);
        e.str("a/#");
        e.u8(1);
        e.u32(7);
        e.u8(0);
        let record = SessionRecord::from_bytes(&e.buf).unwrap();
        assert_eq!(record.subscriptions[0].filter, "a/#");
        assert_eq!(record.subscriptions[0].subscription_id, Some(7));
        assert_eq!(record.subscriptions[0].slice, None);
    }
}
