//! mosquitto's persistence file, `mosquitto.db`, read for the migration:
//! format 6 (mosquitto 2.0) and 5 (1.6), which differ only in a client's
//! fixed part.
//!
//! The file is a 15-byte magic, a CRC (written as 0, not checked), a
//! big-endian format number, then chunks: a big-endian type and length,
//! then that many bytes. Inside a chunk the fixed part is a C struct
//! written as it lay in memory: lengths and counters big-endian, but the
//! message ids and times in the writing machine's own byte order, padding
//! included. That order is told from the CFG chunk's last message id,
//! which reads as a small number only the right way round (a MIPS router
//! writes big-endian, an ARM or x86 gateway little-endian).
//!
//! Every length is checked against what is left of its chunk, and every
//! chunk's against the file; a fault names the byte offset and the chunk.

use std::collections::{BTreeMap, HashMap};

use crate::codec::{decode_publish_properties, Properties};

/// The largest file read whole: the migrated provider's own bound.
pub const MAX_DB_BYTES: u64 = 256 * 1024 * 1024;

const MAGIC: [u8; 15] = *b"\x00\xb5\x00mosquitto db";
const CFG: u32 = 1;
const MSG_STORE: u32 = 2;
const CLIENT_MSG: u32 = 3;
const RETAIN: u32 = 4;
const SUB: u32 = 5;
const CLIENT: u32 = 6;

/// A message mosquitto kept, retained or owed to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    pub topic: String,
    pub payload: Vec<u8>,
    pub qos: u8,
    /// Unix seconds it expires at; 0 for never.
    pub expiry_unix_s: i64,
    pub properties: Properties,
}

/// One subscription as mosquitto kept it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub filter: String,
    pub qos: u8,
    /// MQTT 5's option bits above the QoS: No Local, Retain As Published,
    /// Retain Handling.
    pub options: u8,
    /// Its Subscription Identifier; 0 for none.
    pub identifier: u32,
}

/// A session mosquitto kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Client {
    pub id: String,
    /// The Session Expiry Interval; `u32::MAX` never expires.
    pub expiry_interval_s: u32,
    /// Unix seconds the session expires at; 0 for never.
    pub expiry_unix_s: i64,
    pub subscriptions: Vec<Subscription>,
    pub messages: Vec<Owed>,
}

/// A message a session was owed (outgoing), or holds unreleased (an
/// incoming QoS 2 publish).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owed {
    /// The stored message's id.
    pub message: u64,
    pub qos: u8,
    pub outgoing: bool,
    /// An outgoing QoS 2 delivery whose PUBREC came: the client has it,
    /// and only its release was owed.
    pub received: bool,
}

/// mosquitto's delivery states of a QoS 2 message past its PUBREC.
const RESEND_PUBREL: u8 = 6;
const WAIT_FOR_PUBCOMP: u8 = 9;

/// What a `mosquitto.db` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Db {
    pub version: u32,
    /// Every stored message, by mosquitto's id (its publication order).
    pub messages: BTreeMap<u64, StoredMessage>,
    /// The retained values' message ids, in the file's order.
    pub retained: Vec<u64>,
    pub clients: Vec<Client>,
    /// Chunks of a type this reader does not know, skipped.
    pub unknown_chunks: u64,
}

/// One chunk's bytes, read from the front.
struct Chunk<'a> {
    bytes: &'a [u8],
    big_endian_host: bool,
}

impl<'a> Chunk<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.bytes.len() {
            return Err(format!(
                "{what} needs {n} bytes where the chunk has {} left",
                self.bytes.len()
            ));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        Ok(self.take(N, what)?.try_into().expect("N bytes taken"))
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// A field written in the host's byte order.
    fn host_u64(&mut self, what: &str) -> Result<u64, String> {
        let bytes = self.array(what)?;
        Ok(match self.big_endian_host {
            true => u64::from_be_bytes(bytes),
            false => u64::from_le_bytes(bytes),
        })
    }

    fn text(&mut self, len: u16, what: &str) -> Result<String, String> {
        let bytes = self.take(usize::from(len), what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }

    fn end(&self, what: &str) -> Result<(), String> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(format!("{n} bytes follow the end of {what}")),
        }
    }
}

/// Reads a whole `mosquitto.db`; the error says what is wrong and where.
pub fn read(bytes: &[u8]) -> Result<Db, String> {
    if bytes.len() < 23 || bytes[..15] != MAGIC {
        return Err(
            "is not a mosquitto persistence file (its first 15 bytes are not mosquitto's magic)"
                .into(),
        );
    }
    let version = u32::from_be_bytes(bytes[19..23].try_into().expect("4 bytes"));
    if version != 5 && version != 6 {
        return Err(format!("is mosquitto persistence format {version}; this migration reads formats 5 and 6 (mosquitto 1.6 and 2.0): start that mosquitto's own version once to rewrite it, or move the file aside to migrate without its data"));
    }
    let mut db = Db {
        version,
        ..Db::default()
    };
    let mut clients: HashMap<String, usize> = HashMap::new();
    let mut big_endian_host = false;
    let mut at = 23;
    while at < bytes.len() {
        let header = bytes
            .get(at..at + 8)
            .ok_or_else(|| format!("at byte {at}: the file ends inside a chunk header"))?;
        let kind = u32::from_be_bytes(header[..4].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(header[4..].try_into().expect("4 bytes")) as usize;
        let start = at + 8;
        let body = bytes
            .get(start..)
            .and_then(|rest| rest.get(..len))
            .ok_or_else(|| {
                format!(
                    "at byte {at}: chunk type {kind} says {len} bytes, past the file's end ({} bytes)",
                    bytes.len()
                )
            })?;
        let mut chunk = Chunk {
            bytes: body,
            big_endian_host,
        };
        let done = match kind {
            CFG => read_cfg(&mut chunk).map(|big| big_endian_host = big),
            MSG_STORE => read_message(&mut chunk, &mut db),
            CLIENT_MSG => read_client_message(&mut chunk, &mut db, &mut clients),
            RETAIN => chunk.host_u64("a retained message id").and_then(|id| {
                db.retained.push(id);
                chunk.end("a RETAIN chunk")
            }),
            SUB => read_subscription(&mut chunk, &mut db, &mut clients),
            CLIENT => read_client(&mut chunk, &mut db, &mut clients),
            _ => {
                db.unknown_chunks += 1;
                Ok(())
            }
        };
        done.map_err(|why| format!("at byte {at}, chunk type {kind}: {why}"))?;
        at = start + len;
    }
    for id in &db.retained {
        if !db.messages.contains_key(id) {
            return Err(format!(
                "a RETAIN chunk names message {id}, which no MSG_STORE chunk holds"
            ));
        }
    }
    for client in &db.clients {
        if let Some(owed) = client
            .messages
            .iter()
            .find(|o| !db.messages.contains_key(&o.message))
        {
            return Err(format!(
                "a CLIENT_MSG chunk of client {:?} names message {}, which no MSG_STORE chunk holds",
                client.id, owed.message
            ));
        }
    }
    Ok(db)
}

/// The CFG chunk: whether its writer was big-endian.
fn read_cfg(chunk: &mut Chunk) -> Result<bool, String> {
    let last_id: [u8; 8] = chunk.array("the last message id")?;
    let _shutdown = chunk.u8("the shutdown flag")?;
    let id_size = chunk.u8("the message id size")?;
    if id_size != 8 {
        return Err(format!(
            "message ids are {id_size} bytes; mosquitto writes 8"
        ));
    }
    // The struct's padding to 16 bytes.
    chunk.take(6, "the CFG chunk's padding")?;
    chunk.end("a CFG chunk")?;
    Ok(u64::from_be_bytes(last_id) < u64::from_le_bytes(last_id))
}

fn read_message(chunk: &mut Chunk, db: &mut Db) -> Result<(), String> {
    let id = chunk.host_u64("the message id")?;
    let expiry_unix_s = chunk.host_u64("the expiry time")? as i64;
    let payload_len = chunk.u32("the payload length")?;
    let _source_mid = chunk.u16("the source packet id")?;
    let source_id_len = chunk.u16("the source id length")?;
    let source_user_len = chunk.u16("the source user name length")?;
    let topic_len = chunk.u16("the topic length")?;
    let _source_port = chunk.u16("the source port")?;
    let qos = chunk.u8("the QoS")?;
    let _retain = chunk.u8("the retain flag")?;
    if qos > 2 {
        return Err(format!("message {id} has QoS {qos}"));
    }
    chunk.take(usize::from(source_id_len), "the source client id")?;
    chunk.take(usize::from(source_user_len), "the source user name")?;
    let topic = chunk.text(topic_len, "the topic")?;
    let payload = chunk.take(payload_len as usize, "the payload")?.to_vec();
    let properties = match chunk.bytes.is_empty() {
        true => Properties::default(),
        false => decode_publish_properties(chunk.bytes)
            .map_err(|e| format!("message {id}'s MQTT 5 properties: {e}"))?,
    };
    let message = StoredMessage {
        topic,
        payload,
        qos,
        expiry_unix_s,
        properties,
    };
    if db.messages.insert(id, message).is_some() {
        return Err(format!("message id {id} is stored twice"));
    }
    Ok(())
}

/// The session of `id`, made when its first chunk is met.
fn client_of<'d>(
    db: &'d mut Db,
    clients: &mut HashMap<String, usize>,
    id: String,
) -> &'d mut Client {
    let index = *clients.entry(id.clone()).or_insert_with(|| {
        db.clients.push(Client {
            id,
            expiry_interval_s: u32::MAX,
            ..Client::default()
        });
        db.clients.len() - 1
    });
    &mut db.clients[index]
}

fn read_client(
    chunk: &mut Chunk,
    db: &mut Db,
    clients: &mut HashMap<String, usize>,
) -> Result<(), String> {
    let expiry_unix_s = chunk.host_u64("the session expiry time")? as i64;
    let expiry_interval_s = chunk.u32("the session expiry interval")?;
    let _last_mid = chunk.u16("the last packet id")?;
    let id_len = chunk.u16("the client id length")?;
    let mut user_len = 0;
    if db.version == 6 {
        let _port = chunk.u16("the listener port")?;
        user_len = chunk.u16("the user name length")?;
        chunk.take(4, "the CLIENT chunk's padding")?;
    }
    let id = chunk.text(id_len, "the client id")?;
    chunk.take(usize::from(user_len), "the user name")?;
    chunk.end("a CLIENT chunk")?;
    let client = client_of(db, clients, id);
    client.expiry_unix_s = expiry_unix_s;
    client.expiry_interval_s = expiry_interval_s;
    Ok(())
}

fn read_subscription(
    chunk: &mut Chunk,
    db: &mut Db,
    clients: &mut HashMap<String, usize>,
) -> Result<(), String> {
    let identifier = chunk.u32("the subscription identifier")?;
    let id_len = chunk.u16("the client id length")?;
    let filter_len = chunk.u16("the filter length")?;
    let qos = chunk.u8("the QoS")?;
    let options = chunk.u8("the options")?;
    chunk.take(2, "the SUB chunk's padding")?;
    let id = chunk.text(id_len, "the client id")?;
    let filter = chunk.text(filter_len, "the filter")?;
    chunk.end("a SUB chunk")?;
    if qos > 2 || options & 0x30 == 0x30 {
        return Err(format!(
            "client {id:?}'s subscription to {filter:?} has QoS {qos} and options {options:#04x}, which no SUBSCRIBE carries"
        ));
    }
    client_of(db, clients, id).subscriptions.push(Subscription {
        filter,
        qos,
        options,
        identifier,
    });
    Ok(())
}

fn read_client_message(
    chunk: &mut Chunk,
    db: &mut Db,
    clients: &mut HashMap<String, usize>,
) -> Result<(), String> {
    let message = chunk.host_u64("the message id")?;
    let _mid = chunk.u16("the packet id")?;
    let id_len = chunk.u16("the client id length")?;
    let qos = chunk.u8("the QoS")?;
    let state = chunk.u8("the delivery state")?;
    let _retain_dup = chunk.u8("the retain and dup flags")?;
    let direction = chunk.u8("the direction")?;
    let id = chunk.text(id_len, "the client id")?;
    // What follows is the delivery's Subscription Identifier: the
    // subscription gives it again at delivery here.
    client_of(db, clients, id).messages.push(Owed {
        message,
        qos,
        outgoing: direction == 1,
        received: state == RESEND_PUBREL || state == WAIT_FOR_PUBCOMP,
    });
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A file built chunk by chunk, as mosquitto lays it out.
    pub(crate) struct Builder {
        pub bytes: Vec<u8>,
        big_endian: bool,
    }

    impl Builder {
        pub fn new(version: u32, big_endian: bool) -> Builder {
            let mut bytes = MAGIC.to_vec();
            bytes.extend([0; 4]);
            bytes.extend(version.to_be_bytes());
            Builder { bytes, big_endian }
        }

        fn host(&self, v: u64) -> [u8; 8] {
            match self.big_endian {
                true => v.to_be_bytes(),
                false => v.to_le_bytes(),
            }
        }

        pub fn chunk(&mut self, kind: u32, body: &[u8]) -> &mut Builder {
            self.bytes.extend(kind.to_be_bytes());
            self.bytes.extend((body.len() as u32).to_be_bytes());
            self.bytes.extend(body);
            self
        }

        pub fn cfg(&mut self, last_id: u64) -> &mut Builder {
            let mut b = self.host(last_id).to_vec();
            b.extend([1, 8, 0, 0, 0, 0, 0, 0]);
            self.chunk(CFG, &b)
        }

        pub fn message(
            &mut self,
            id: u64,
            topic: &str,
            payload: &[u8],
            qos: u8,
            props: &[u8],
        ) -> &mut Builder {
            let mut b = self.host(id).to_vec();
            b.extend(self.host(0));
            b.extend((payload.len() as u32).to_be_bytes());
            b.extend(1u16.to_be_bytes());
            b.extend(3u16.to_be_bytes());
            b.extend(0u16.to_be_bytes());
            b.extend((topic.len() as u16).to_be_bytes());
            b.extend(1883u16.to_be_bytes());
            b.extend([qos, 1]);
            b.extend(b"pub");
            b.extend(topic.as_bytes());
            b.extend(payload);
            b.extend(props);
            self.chunk(MSG_STORE, &b)
        }

        pub fn retain(&mut self, id: u64) -> &mut Builder {
            let b = self.host(id);
            self.chunk(RETAIN, &b)
        }

        pub fn client(
            &mut self,
            version: u32,
            id: &str,
            interval_s: u32,
            at_s: u64,
        ) -> &mut Builder {
            let mut b = self.host(at_s).to_vec();
            b.extend(interval_s.to_be_bytes());
            b.extend(0u16.to_be_bytes());
            b.extend((id.len() as u16).to_be_bytes());
            if version == 6 {
                b.extend(1883u16.to_be_bytes());
                b.extend(2u16.to_be_bytes());
                b.extend([0; 4]);
            }
            b.extend(id.as_bytes());
            if version == 6 {
                b.extend(b"me");
            }
            self.chunk(CLIENT, &b)
        }

        pub fn sub(
            &mut self,
            id: &str,
            filter: &str,
            qos: u8,
            options: u8,
            identifier: u32,
        ) -> &mut Builder {
            let mut b = identifier.to_be_bytes().to_vec();
            b.extend((id.len() as u16).to_be_bytes());
            b.extend((filter.len() as u16).to_be_bytes());
            b.extend([qos, options, 0, 0]);
            b.extend(id.as_bytes());
            b.extend(filter.as_bytes());
            self.chunk(SUB, &b)
        }

        pub fn queued(&mut self, id: &str, message: u64, qos: u8) -> &mut Builder {
            self.delivery(id, message, qos, 11)
        }

        /// A delivery in mosquitto's `state` (11: queued).
        pub fn delivery(&mut self, id: &str, message: u64, qos: u8, state: u8) -> &mut Builder {
            let mut b = self.host(message).to_vec();
            b.extend(1u16.to_be_bytes());
            b.extend((id.len() as u16).to_be_bytes());
            b.extend([qos, state, 0, 1]);
            b.extend(id.as_bytes());
            self.chunk(CLIENT_MSG, &b)
        }
    }

    fn sample(version: u32, big_endian: bool) -> Vec<u8> {
        // Content Type "t" and a User Property k=v.
        let props = [11, 0x03, 0, 1, b't', 0x26, 0, 1, b'k', 0, 1, b'v'];
        let mut b = Builder::new(version, big_endian);
        b.cfg(3)
            .message(1, "state/lamp", b"on", 1, &[])
            .message(2, "dev/7/cmd", b"go", 1, &props)
            .client(version, "keeper", 7200, 1_800_000_000)
            .queued("keeper", 2, 1)
            .sub("keeper", "dev/+/cmd", 1, 0x04, 9)
            .retain(1);
        b.bytes.clone()
    }

    #[test]
    fn both_formats_and_both_byte_orders_read_alike() {
        for (version, big) in [(6, false), (6, true), (5, false)] {
            let db = read(&sample(version, big)).unwrap();
            assert_eq!(db.retained, vec![1]);
            assert_eq!(db.messages[&1].topic, "state/lamp");
            assert_eq!(db.messages[&1].payload, b"on");
            let props = &db.messages[&2].properties;
            assert_eq!(props.content_type.as_deref(), Some("t"));
            assert_eq!(props.user_properties, vec![("k".into(), "v".into())]);
            assert_eq!(
                db.clients,
                vec![Client {
                    id: "keeper".into(),
                    expiry_interval_s: 7200,
                    expiry_unix_s: 1_800_000_000,
                    subscriptions: vec![Subscription {
                        filter: "dev/+/cmd".into(),
                        qos: 1,
                        options: 0x04,
                        identifier: 9,
                    }],
                    messages: vec![Owed {
                        message: 2,
                        qos: 1,
                        outgoing: true,
                        received: false,
                    }],
                }],
                "format {version}, big-endian {big}"
            );
        }
    }

    #[test]
    fn a_cut_inside_a_chunk_is_refused_and_between_chunks_reads_as_less() {
        let whole = sample(6, false);
        let all = read(&whole).unwrap();
        let mut read_as_less = 0;
        for len in 0..whole.len() {
            if let Ok(db) = read(&whole[..len]) {
                assert_ne!(db, all, "{len} bytes");
                read_as_less += 1;
            }
        }
        // The header alone, and after each of the seven chunks but the last.
        assert_eq!(read_as_less, 7);
        let mut longer = whole.clone();
        longer.extend([0, 0, 0, 2]);
        assert!(read(&longer)
            .unwrap_err()
            .contains("ends inside a chunk header"));
    }

    #[test]
    fn no_changed_byte_makes_the_reader_panic() {
        let whole = sample(6, false);
        for at in 0..whole.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut changed = whole.clone();
                changed[at] = value;
                // Read or refused, never a panic or a runaway allocation.
                let _ = read(&changed);
            }
        }
    }

    #[test]
    fn a_corrupt_file_names_the_byte_and_what_is_wrong() {
        let mut other = sample(6, false);
        other[22] = 4;
        assert!(read(&other).unwrap_err().contains("format 4"));
        assert!(read(b"not a db at all, really")
            .unwrap_err()
            .contains("magic"));
        // A chunk longer than the file.
        let mut b = Builder::new(6, false);
        b.cfg(1);
        b.bytes.extend(2u32.to_be_bytes());
        b.bytes.extend(1000u32.to_be_bytes());
        let why = read(&b.bytes).unwrap_err();
        assert!(
            why.starts_with("at byte 47: chunk type 2 says 1000 bytes"),
            "{why}"
        );
        // A topic longer than its chunk.
        let mut b = Builder::new(6, false);
        b.cfg(1).message(1, "t", b"x", 0, &[]);
        b.bytes[47 + 8 + 26] = 0xff;
        let why = read(&b.bytes).unwrap_err();
        assert!(
            why.contains("at byte 47, chunk type 2: the topic needs"),
            "{why}"
        );
        // A retained value with no message.
        let mut b = Builder::new(6, false);
        b.cfg(1).retain(5);
        assert!(read(&b.bytes).unwrap_err().contains("names message 5"));
        // Properties that are not a property block.
        let mut b = Builder::new(6, false);
        b.cfg(1).message(1, "t", b"x", 0, &[5, 0x99, 0, 0, 0, 0]);
        assert!(read(&b.bytes).unwrap_err().contains("MQTT 5 properties"));
    }
}
