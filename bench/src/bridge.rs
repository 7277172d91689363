//! Figure 11: a bridge draining a backlog upstream. saguin bridges its
//! append channel `durable/#` out to a mosquitto peer; the peer is paused
//! (SIGSTOP) while the backlog is published to saguin and stored, then
//! resumed, and the run is the time until a subscriber at the peer has
//! every record. One topic: per-topic order costs a round trip per record.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use saguin::codec::{Packet, ProtocolVersion, QoS};

use crate::brokers::{Broker, BrokerBinaries, BrokerKind, SaguinSetup};
use crate::client::{Client, ClientOptions};
use crate::queue::publish_backlog;

/// Longest a drain may take before the run is called failed.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest the bridge may take to bring its link up.
const LINK_TIMEOUT: Duration = Duration::from_secs(15);

const READER: ClientOptions = ClientOptions {
    version: ProtocolVersion::V5,
    keep_alive_s: 60,
    receive_maximum: Some(100),
};

/// How long `records` records, stored while the peer was paused, take to
/// reach a subscriber at the peer once it resumes.
pub fn drain_upstream(binaries: &BrokerBinaries, records: u64) -> Result<Duration, String> {
    let peer = Broker::start(BrokerKind::Mosquitto, binaries)?;
    let saguin = Broker::start_with(
        BrokerKind::Saguin,
        binaries,
        SaguinSetup::Bridge(peer.address.port()),
    )?;
    let deadline = Instant::now() + LINK_TIMEOUT;
    while !saguin.output_contains("bridge upstream: link to") {
        if Instant::now() > deadline {
            return Err("the bridge's link did not come up".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = paused_then_drained(peer.address, peer.pid(), saguin.address, records);
    saguin.stop();
    peer.stop();
    result
}

fn paused_then_drained(
    peer: SocketAddr,
    peer_pid: u32,
    saguin: SocketAddr,
    records: u64,
) -> Result<Duration, String> {
    let mut reader = Client::connect(peer, "upstream-reader", &READER)?;
    reader.subscribe("up/#", QoS::AtLeastOnce)?;
    signal(peer_pid, "-STOP")?;
    let filled = publish_backlog(saguin, "bench-device", records, |_| "durable/bench".into());
    signal(peer_pid, "-CONT")?;
    filled.map_err(|e| format!("filling the backlog: {e}"))?;
    let started = Instant::now();
    let deadline = started + RUN_TIMEOUT;
    let mut received = 0u64;
    while received < records {
        while let Some(packet) = reader.next_packet().map_err(|e| format!("upstream: {e}"))? {
            if let Packet::Publish(publish) = packet {
                received += 1;
                if let Some(id) = publish.packet_id {
                    reader.queue_puback(id);
                }
            }
        }
        reader.flush()?;
        if Instant::now() > deadline {
            return Err(format!("{received} of {records} records upstream in time"));
        }
        if received < records {
            reader
                .fill()
                .map_err(|e| format!("upstream, after {received} records: {e}"))?;
        }
    }
    Ok(started.elapsed())
}

fn signal(pid: u32, signal: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("kill {signal}: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("kill {signal} {pid} failed"))
}
