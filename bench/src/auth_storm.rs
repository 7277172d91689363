//! Figure 8: a storm of CONNECTs with a wrong password, and what it costs
//! a client already connected. Both brokers read one password file; the
//! storm is refused whole while a bystander publishes at QoS 1, one at a
//! time, timing each PUBACK.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use saguin::codec::{Packet, ProtocolVersion, Publish, QoS, ReasonCode};

use crate::brokers::BENCH_USER;
use crate::client::{Client, ClientOptions};

/// Wrong-password CONNECTs in one run.
pub const STORM_CONNECTS: usize = 1000;
/// The same for an argon2id entry at mosquitto 2.1's costs, each check
/// filling 46 MiB: tens of milliseconds apiece, so fewer of them.
pub const ARGON2ID_STORM_CONNECTS: usize = 100;
/// Threads sending them, each one CONNECT after another.
pub const STORM_THREADS: usize = 4;
/// The bystander publishes once per period, waiting for each PUBACK.
pub(crate) const BYSTANDER_PERIOD: Duration = Duration::from_millis(2);
const PUBACK_TIMEOUT: Duration = Duration::from_secs(10);

const OPTIONS: ClientOptions = ClientOptions {
    version: ProtocolVersion::V311,
    keep_alive_s: 60,
    receive_maximum: None,
};

#[derive(Clone, Debug)]
pub struct StormOutcome {
    /// From the first wrong CONNECT sent to the last refusal read.
    pub refuse_all_ms: f64,
    /// The bystander's PUBACK round trips while the storm ran.
    pub bystander_p99_us: f64,
    pub bystander_samples: usize,
    pub failure: Option<String>,
}

/// `connects` wrong-password CONNECTs from [`STORM_THREADS`] threads.
pub fn run_storm(address: SocketAddr, run_label: &str, connects: usize) -> StormOutcome {
    let failed = |failure: String| StormOutcome {
        refuse_all_ms: f64::NAN,
        bystander_p99_us: f64::NAN,
        bystander_samples: 0,
        failure: Some(failure),
    };
    let bystander = match Client::connect(address, &format!("{run_label}-bystander"), &OPTIONS) {
        Ok(client) => client,
        Err(error) => return failed(error),
    };
    let storm_over = AtomicBool::new(false);
    let topic = format!("bench/{run_label}/bystander");
    let (storm, bystander) = thread::scope(|scope| {
        let bystander = scope.spawn(|| publish_until(bystander, &topic, &storm_over));
        let started = Instant::now();
        let threads: Vec<_> = (0..STORM_THREADS)
            .map(|t| {
                let label = format!("{run_label}-storm{t}");
                scope.spawn(move || refuse_each(address, &label, connects / STORM_THREADS))
            })
            .collect();
        let storm: Result<(), String> = threads.into_iter().try_for_each(|t| {
            t.join()
                .unwrap_or_else(|_| Err("a storm thread panicked".into()))
        });
        let elapsed = started.elapsed();
        storm_over.store(true, Ordering::Relaxed);
        let bystander = bystander
            .join()
            .unwrap_or_else(|_| Err("the bystander panicked".into()));
        (storm.map(|()| elapsed), bystander)
    });
    match (storm, bystander) {
        (Ok(elapsed), Ok(mut latencies_us)) => {
            latencies_us.sort_unstable();
            StormOutcome {
                refuse_all_ms: elapsed.as_secs_f64() * 1000.0,
                bystander_p99_us: crate::load::percentile(&latencies_us, 0.99),
                bystander_samples: latencies_us.len(),
                failure: None,
            }
        }
        (Err(error), _) | (_, Err(error)) => failed(error),
    }
}

/// `count` CONNECTs with a wrong password, one after another, each of
/// which must be refused.
fn refuse_each(address: SocketAddr, label: &str, count: usize) -> Result<(), String> {
    let credentials = Some((BENCH_USER, b"not-the-password".as_slice()));
    for i in 0..count {
        let (_, code) = Client::open(address, &format!("{label}-{i}"), &OPTIONS, credentials)?;
        if code == ReasonCode::SUCCESS {
            return Err(format!("{label}: a wrong password was admitted"));
        }
    }
    Ok(())
}

/// Publishes at QoS 1 every period until the storm is over, returning each
/// PUBACK's round trip in microseconds.
pub(crate) fn publish_until(
    mut client: Client,
    topic: &str,
    over: &AtomicBool,
) -> Result<Vec<u64>, String> {
    let mut latencies_us = Vec::new();
    let mut packet_id: u16 = 0;
    while !over.load(Ordering::Relaxed) {
        packet_id = packet_id.checked_add(1).unwrap_or(1);
        let sent_at = Instant::now();
        client.queue(&Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: topic.to_string(),
            packet_id: Some(packet_id),
            payload: b"bystander".to_vec(),
            ..Publish::default()
        }));
        client.flush()?;
        match client.wait_for_packet(PUBACK_TIMEOUT)? {
            Packet::Puback(ack) if ack.packet_id == packet_id => {}
            other => return Err(format!("bystander: expected its PUBACK, got {other:?}")),
        }
        latencies_us.push(sent_at.elapsed().as_micros() as u64);
        thread::sleep(BYSTANDER_PERIOD.saturating_sub(sent_at.elapsed()));
    }
    client.disconnect();
    Ok(latencies_us)
}
