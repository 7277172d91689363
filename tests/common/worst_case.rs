//! An adversarial driver for the memory promise: it pushes every path by
//! which the broker's memory grows with what clients do to its bound at
//! once, over real sockets, so the caller can hold the broker's peak
//! resident memory to the worst case the broker printed.
//!
//! Only std and the crate's codec, so `tests/` and `saguin-bench
//! worst-case` share it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use saguin::codec::{
    decode_fixed_header, decode_packet, encode, Connect, Disconnect, Packet, Properties,
    ProtocolVersion, Publish, QoS, Subscribe, SubscriptionOptions,
};

/// What the driver allows the broker beyond its printed worst case: the
/// binary's own pages, the allocator's slack and thread stacks, which no
/// configured bound counts.
pub const ALLOWANCE_BYTES: u64 = 32 * 1024 * 1024;

/// The bounds a profile sets, as the driver pushes them.
#[derive(Clone, Debug)]
pub struct Bounds {
    pub connections: usize,
    pub persistent_sessions: usize,
    pub subscriptions: usize,
    pub message_bytes: usize,
    pub queue_bytes: usize,
    pub qos2_inflight: usize,
    pub topic_levels: usize,
    pub client_id_length: usize,
    /// The retained store's bound.
    pub retained_bytes: usize,
}

/// What the driver did, for the report.
#[derive(Clone, Debug, Default)]
pub struct Pushed {
    pub sessions_left: usize,
    pub readers: usize,
    pub qos2_held: usize,
    pub retained: usize,
    pub published: usize,
    pub published_qos0: usize,
}

const V5: ProtocolVersion = ProtocolVersion::V5;
/// Room a PUBLISH's header and properties take beside its payload.
const PUBLISH_OVERHEAD_BYTES: usize = 256;

/// A blocking MQTT 5 socket that reads only when asked.
pub struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Wire {
    fn open(address: &str) -> std::io::Result<Wire> {
        let stream = TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        Ok(Wire {
            stream,
            buf: Vec::new(),
        })
    }

    fn send(&mut self, packet: &Packet) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        encode(packet, V5, &mut bytes);
        self.stream.write_all(&bytes)
    }

    /// The next packet within `timeout`; `None` on a timeout or a close.
    fn recv(&mut self, timeout: Duration) -> Option<Packet> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(header)) = decode_fixed_header(&self.buf) {
                if self.buf.len() >= header.packet_len() {
                    let body = self.buf[header.header_len..header.packet_len()].to_vec();
                    self.buf.drain(..header.packet_len());
                    return decode_packet(&header, &body, Some(V5)).ok();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.stream.set_read_timeout(Some(left)).ok()?;
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Reads until a packet `wanted` accepts, dropping others.
    fn recv_until(
        &mut self,
        timeout: Duration,
        wanted: impl Fn(&Packet) -> bool,
    ) -> Option<Packet> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let packet = self.recv(left)?;
            if wanted(&packet) {
                return Some(packet);
            }
        }
    }
}

fn connect(address: &str, client_id: &str, expiry_s: u32, wait: Duration) -> Option<Wire> {
    let mut wire = Wire::open(address).ok()?;
    let properties = Properties {
        session_expiry_interval_s: Some(expiry_s).filter(|&s| s > 0),
        ..Properties::default()
    };
    let connect = Connect {
        protocol_version: V5,
        clean_start: true,
        keep_alive_s: 0,
        client_id: client_id.into(),
        will: None,
        username: None,
        password: None,
        properties,
    };
    wire.send(&Packet::Connect(Box::new(connect))).ok()?;
    match wire.recv(wait)? {
        Packet::Connack(c) if c.reason_code.0 == 0 => Some(wire),
        _ => None,
    }
}

/// The `subscriptions` filters every session takes: distinct and as deep
/// as the profile allows; [`topic`] cycles through them, so each session
/// is sent every message.
fn filters(b: &Bounds) -> Vec<String> {
    let middle = "+/".repeat(b.topic_levels.saturating_sub(3));
    (0..b.subscriptions)
        .map(|j| format!("w/{j}/{middle}#"))
        .collect()
}

/// A topic every filter of [`filters`] matches: `w/<n>/...` at full depth.
fn topic(b: &Bounds, n: usize) -> String {
    let mut topic = format!("w/{}", n % b.subscriptions.max(1));
    for _ in 2..b.topic_levels {
        topic.push_str("/x");
    }
    topic
}

fn subscribe(wire: &mut Wire, filters: &[String], wait: Duration) -> bool {
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    // In packets of a few filters, so none passes the packet bound.
    for (index, chunk) in filters.chunks(8).enumerate() {
        let subscribe = Subscribe {
            packet_id: index as u16 + 1,
            properties: Properties::default(),
            filters: chunk.iter().map(|f| (f.clone(), options)).collect(),
        };
        if wire.send(&Packet::Subscribe(subscribe)).is_err()
            || wire
                .recv_until(wait, |p| matches!(p, Packet::Suback(_)))
                .is_none()
        {
            return false;
        }
    }
    true
}

/// A client id of the longest length allowed, random past its prefix.
fn client_id(b: &Bounds, prefix: &str, n: usize, seed: u64) -> String {
    let mut id = format!("{prefix}-{n}-{seed:x}-");
    let mut x = seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while id.len() < b.client_id_length {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        id.push(char::from(b'a' + (x % 26) as u8));
    }
    id
}

/// Pushes every path to its bound at once and leaves it there: the
/// readers and the publisher stay connected in the returned sockets
/// until the caller drops them, after reading the broker's memory.
pub fn push(address: &str, b: &Bounds, seed: u64, wait: Duration) -> (Pushed, Vec<Wire>) {
    let mut pushed = Pushed::default();
    let mut held = Vec::new();
    let filters = filters(b);
    let payload_bytes = b
        .message_bytes
        .saturating_sub(PUBLISH_OVERHEAD_BYTES)
        .max(1);

    // Random client ids that leave sessions behind, every filter taken,
    // and a tenth more than the bound keeps.
    for n in 0..b.persistent_sessions + b.persistent_sessions / 10 + 1 {
        let id = client_id(b, "away", n, seed);
        let Some(mut wire) = connect(address, &id, 3600, wait) else {
            continue;
        };
        if subscribe(&mut wire, &filters, wait) {
            pushed.sessions_left += 1;
        }
        let _ = wire.send(&Packet::Disconnect(Disconnect::default()));
    }

    // Readers that never read once subscribed, each holding its QoS 2
    // exchanges unreleased; one connection is kept for the publisher.
    for n in 0..b.connections.saturating_sub(1) {
        let id = client_id(b, "reader", n, seed);
        let Some(mut wire) = connect(address, &id, 0, wait) else {
            continue;
        };
        if !subscribe(&mut wire, &filters, wait) {
            continue;
        }
        for k in 0..b.qos2_inflight {
            let publish = Publish {
                qos: QoS::ExactlyOnce,
                topic: format!("h/{n}"),
                packet_id: Some(k as u16 + 1),
                payload: vec![b'q'; payload_bytes],
                ..Publish::default()
            };
            if wire.send(&Packet::Publish(publish)).is_ok() {
                pushed.qos2_held += 1;
            }
        }
        pushed.readers += 1;
        held.push(wire);
    }

    let Some(mut publisher) = connect(address, &client_id(b, "publisher", 0, seed), 0, wait) else {
        return (pushed, held);
    };
    // Retained values up to the store's bound, and a few past it.
    let retained_each = (payload_bytes / 2).max(1);
    let retained: Vec<Publish> = (0..b.retained_bytes / retained_each + 4)
        .map(|k| Publish {
            qos: QoS::AtLeastOnce,
            retain: true,
            topic: format!("r/{k}"),
            payload: vec![b'r'; retained_each],
            ..Publish::default()
        })
        .collect();
    pushed.retained = publish_acknowledged(&mut publisher, retained, wait);
    // Enough distinct messages to fill every session's queue twice over.
    let messages = 2 * b.queue_bytes / payload_bytes + 4;
    let flood: Vec<Publish> = (0..messages)
        .map(|n| Publish {
            qos: QoS::AtLeastOnce,
            topic: topic(b, n),
            payload: vec![(n % 251) as u8; payload_bytes],
            ..Publish::default()
        })
        .collect();
    pushed.published = publish_acknowledged(&mut publisher, flood.clone(), wait);
    // The same at QoS 0, which a reader's outbox sheds past its bound;
    // one QoS 1 publish after them shows they were all taken.
    let mut taken = true;
    for mut publish in flood {
        publish.qos = QoS::AtMostOnce;
        taken &= publisher.send(&Packet::Publish(publish)).is_ok();
    }
    let sync = Publish {
        qos: QoS::AtLeastOnce,
        topic: "s".into(),
        ..Publish::default()
    };
    if taken && publish_acknowledged(&mut publisher, vec![sync], wait) == 1 {
        pushed.published_qos0 = messages;
    }
    held.push(publisher);
    (pushed, held)
}

/// Publishes each of `publishes` at QoS 1, a window in flight so a
/// batching store commits several at once; the PUBACKs that came.
fn publish_acknowledged(wire: &mut Wire, publishes: Vec<Publish>, wait: Duration) -> usize {
    const WINDOW: usize = 16;
    let mut acknowledged = 0;
    for chunk in publishes.chunks(WINDOW) {
        for (k, publish) in chunk.iter().enumerate() {
            let mut publish = publish.clone();
            publish.packet_id = Some(k as u16 + 1);
            if wire.send(&Packet::Publish(publish)).is_err() {
                return acknowledged;
            }
        }
        for _ in chunk {
            match wire.recv_until(wait, |p| matches!(p, Packet::Puback(_))) {
                Some(_) => acknowledged += 1,
                None => return acknowledged,
            }
        }
    }
    acknowledged
}

/// The peak resident memory of process `pid` (`VmHWM`), in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The worst case in the startup line: "... N bytes in all at every bound ...".
pub fn printed_worst_case_bytes(line: &str) -> Option<u64> {
    let before = line.split(" bytes in all").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// `profile` with its limits scaled by `scale` (connections and kept
/// sessions), its doors on port 0 and its files moved into `dir`.
pub fn scaled_profile(profile: &str, dir: &std::path::Path, scale: f64) -> String {
    let mut out = String::with_capacity(profile.len());
    for line in profile.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let scaled = |key: &str| -> Option<String> {
            let n: f64 = trimmed.strip_prefix(key)?.trim().parse().ok()?;
            Some(format!("{indent}{key} {}\n", ((n * scale) as u64).max(2)))
        };
        if trimmed.starts_with("address:") {
            out.push_str(&format!("{indent}address: 127.0.0.1:0\n"));
        } else if trimmed.starts_with("file_path:") {
            out.push_str(&format!(
                "{indent}file_path: {}\n",
                dir.join("saguin.redb").display()
            ));
        } else if trimmed.starts_with("pid_file:") {
            out.push_str(&format!(
                "{indent}pid_file: {}\n",
                dir.join("saguin.pid").display()
            ));
        } else if trimmed.starts_with("snapshot_dir:") {
            out.push_str(&format!("{indent}snapshot_dir: {}\n", dir.display()));
        } else if let Some(line) = scaled("max_connections:") {
            out.push_str(&line);
        } else if let Some(line) = scaled("max_persistent_sessions:") {
            out.push_str(&line);
        } else if trimmed.starts_with("max_connect_rate:") {
            out.push_str(&format!("{indent}max_connect_rate: none\n"));
        } else if trimmed.starts_with("log_level:") {
            out.push_str(&format!("{indent}log_level: info\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A profile's bounds, read from what `saguin --check-config --output`
/// resolves it to.
pub fn bounds_of(resolved_yaml: &str) -> Bounds {
    let value = |key: &str| -> usize {
        resolved_yaml
            .lines()
            .find_map(|line| line.trim_start().strip_prefix(&format!("{key}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in the resolved configuration"))
    };
    Bounds {
        connections: value("max_connections"),
        persistent_sessions: value("max_persistent_sessions"),
        subscriptions: value("max_subscriptions"),
        message_bytes: value("max_message_size"),
        queue_bytes: value("session_queue_bytes"),
        qos2_inflight: value("max_inflight_per_client"),
        topic_levels: value("max_topic_levels"),
        client_id_length: value("max_client_id_length"),
        retained_bytes: 8 * 1024 * 1024,
    }
}
