//! A connection storm (figure 16b and 16c): new clients arriving at a set
//! rate, each connecting, subscribing once and publishing once at QoS 1,
//! then staying connected, while a bystander connected before the storm
//! publishes at QoS 1 at a steady pace and times each PUBACK.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use saguin::codec::{Packet, ProtocolVersion, Publish, QoS};

use crate::client::{Client, ClientOptions, Endpoint};
use crate::load::percentile;

/// Threads making the storm's connections; connection `i` is made by
/// thread `i % STORM_THREADS` at its scheduled time, so a slow handshake
/// delays only the connections of its own thread.
pub const STORM_THREADS: usize = 16;
/// Payload of each storm client's one publish.
pub const STORM_PAYLOAD_BYTES: usize = 64;
/// Longest a storm client waits for its SUBACK or PUBACK.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// MQTT 5 devices that stay connected for the length of a run.
const OPTIONS: ClientOptions = ClientOptions {
    version: ProtocolVersion::V5,
    keep_alive_s: 600,
    receive_maximum: None,
};

/// How many connections arrive, and how fast.
#[derive(Clone, Copy, Debug)]
pub struct Storm {
    pub rate_per_s: u32,
    pub duration: Duration,
}

impl Storm {
    pub fn connections(&self) -> usize {
        (f64::from(self.rate_per_s) * self.duration.as_secs_f64()).round() as usize
    }
}

/// What one storm measured.
#[derive(Clone, Debug)]
pub struct StormOutcome {
    pub connections: usize,
    /// Connections over the time from the first scheduled connect to the
    /// last CONNACK.
    pub accepted_per_s: f64,
    /// From the TCP connect to the CONNACK (through the TLS handshake
    /// where there is one), nearest-rank.
    pub connack_p50_us: f64,
    pub connack_p99_us: f64,
    pub bystander_p99_us: f64,
    pub bystander_samples: usize,
}

/// When connection `index` of a storm at `rate_per_s` is due, from the
/// storm's start.
fn due_after(index: usize, rate_per_s: u32) -> Duration {
    Duration::from_nanos(index as u64 * 1_000_000_000 / u64::from(rate_per_s.max(1)))
}

/// Connections per second: `connections` from the storm's start to the
/// last CONNACK `elapsed` later.
fn accepted_per_s(connections: usize, elapsed: Duration) -> f64 {
    connections as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// One storm against `endpoint`; every client of it must be admitted,
/// granted its subscription and acknowledged, or the run fails.
pub fn run(endpoint: &Endpoint, storm: &Storm, run_label: &str) -> Result<StormOutcome, String> {
    let bystander = Client::connect_to(endpoint, &format!("{run_label}-bystander"), &OPTIONS)?;
    let topic = format!("bench/{run_label}/bystander");
    let storm_over = AtomicBool::new(false);
    let connections = storm.connections();
    let started = Instant::now();
    let (threads, bystander) = thread::scope(|scope| {
        let bystander =
            scope.spawn(|| crate::auth_storm::publish_until(bystander, &topic, &storm_over));
        let threads: Vec<_> = (0..STORM_THREADS)
            .map(|t| {
                scope.spawn(move || {
                    let indices = (t..connections).step_by(STORM_THREADS);
                    connect_each(endpoint, storm, run_label, started, indices)
                })
            })
            .collect();
        let threads: Vec<_> = threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("a storm thread panicked".into()))
            })
            .collect();
        storm_over.store(true, Ordering::Relaxed);
        let bystander = bystander
            .join()
            .unwrap_or_else(|_| Err("the bystander panicked".into()));
        (threads, bystander)
    });
    let mut connack_us = Vec::with_capacity(connections);
    let mut last_connack = None;
    let mut clients = Vec::with_capacity(connections);
    for thread in threads {
        let thread = thread?;
        connack_us.extend(thread.connack_us);
        clients.extend(thread.clients);
        let elapsed = thread.last_connack.map(|at| at.duration_since(started));
        last_connack = last_connack.max(elapsed);
    }
    let mut bystander_us = bystander?;
    // Every client stayed until here; they leave together.
    for client in clients {
        client.disconnect();
    }
    connack_us.sort_unstable();
    bystander_us.sort_unstable();
    Ok(StormOutcome {
        connections,
        accepted_per_s: accepted_per_s(connections, last_connack.unwrap_or_default()),
        connack_p50_us: percentile(&connack_us, 0.50),
        connack_p99_us: percentile(&connack_us, 0.99),
        bystander_p99_us: percentile(&bystander_us, 0.99),
        bystander_samples: bystander_us.len(),
    })
}

/// What one storm thread did: its clients, still connected.
struct ThreadOutcome {
    connack_us: Vec<u64>,
    last_connack: Option<Instant>,
    clients: Vec<Client>,
}

/// Makes the connections `indices`, each at its due time (at once when the
/// thread is already late for it).
fn connect_each(
    endpoint: &Endpoint,
    storm: &Storm,
    run_label: &str,
    started: Instant,
    indices: impl Iterator<Item = usize>,
) -> Result<ThreadOutcome, String> {
    let mut outcome = ThreadOutcome {
        connack_us: Vec::new(),
        last_connack: None,
        clients: Vec::new(),
    };
    for index in indices {
        let due = started + due_after(index, storm.rate_per_s);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let id = format!("{run_label}-s{index}");
        let connecting = Instant::now();
        let mut client = Client::connect_to(endpoint, &id, &OPTIONS)?;
        let connacked = Instant::now();
        outcome
            .connack_us
            .push(connacked.duration_since(connecting).as_micros() as u64);
        outcome.last_connack = Some(connacked);
        // A device's command topic, and its one reading elsewhere: nothing
        // is delivered to any storm client.
        client.subscribe(&format!("storm/{run_label}/{index}/cmd"), QoS::AtLeastOnce)?;
        publish_once(&mut client, &format!("storm/{run_label}/{index}/up"))?;
        outcome.clients.push(client);
    }
    Ok(outcome)
}

/// One QoS 1 publish, waiting for its PUBACK.
fn publish_once(client: &mut Client, topic: &str) -> Result<(), String> {
    const PACKET_ID: u16 = 2;
    client.queue(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.to_string(),
        packet_id: Some(PACKET_ID),
        payload: vec![b's'; STORM_PAYLOAD_BYTES],
        ..Publish::default()
    }));
    client.flush()?;
    match client.wait_for_packet(ANSWER_TIMEOUT)? {
        Packet::Puback(ack) if ack.packet_id == PACKET_ID && ack.reason_code.0 < 0x80 => Ok(()),
        other => Err(format!("{topic}: expected its PUBACK, got {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_due_evenly_over_the_storm() {
        let storm = Storm {
            rate_per_s: 1000,
            duration: Duration::from_secs(3),
        };
        assert_eq!(storm.connections(), 3000);
        assert_eq!(due_after(0, 1000), Duration::ZERO);
        assert_eq!(due_after(1, 1000), Duration::from_millis(1));
        assert_eq!(due_after(2999, 1000), Duration::from_millis(2999));
        assert_eq!(due_after(1, 300), Duration::from_nanos(3_333_333));
    }

    #[test]
    fn the_accepted_rate_counts_to_the_last_connack() {
        assert_eq!(accepted_per_s(3000, Duration::from_secs(3)), 1000.0);
        assert_eq!(accepted_per_s(3000, Duration::from_secs(6)), 500.0);
        assert!(accepted_per_s(1, Duration::ZERO).is_finite());
    }

    #[test]
    fn the_p99_is_the_nearest_rank() {
        let samples: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&samples, 0.99), 990.0);
        assert_eq!(percentile(&samples, 0.50), 500.0);
        assert_eq!(percentile(&[7], 0.99), 7.0);
        assert!(percentile(&[], 0.99).is_nan());
    }
}
