//! Figure 7: a queue on redb. A backlog is published first; then workers
//! subscribe to `$saguin/queue/work` and answer each job as a Paho handler
//! does - the `ack` on the response topic, then the PUBACK, in one write.
//! A run ends when every job has been answered and every answer taken.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use saguin::codec::{Packet, Properties, ProtocolVersion, Publish, QoS};

use crate::brokers::QUEUE_NAME;
use crate::client::{Client, ClientOptions};

/// Longest a run may take before it is called failed.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// QoS 1 publishes a producer keeps unacknowledged while filling a backlog.
const PUBLISH_WINDOW: usize = 64;

const OPTIONS: ClientOptions = ClientOptions {
    version: ProtocolVersion::V5,
    keep_alive_s: 60,
    receive_maximum: None,
};

/// Publishes `jobs` jobs to `work/<tag>/<i>` and waits for every PUBACK.
pub fn fill_backlog(address: SocketAddr, tag: &str, jobs: u64) -> Result<(), String> {
    publish_backlog(address, &format!("{tag}-producer"), jobs, |i| {
        format!("work/{tag}/{i}")
    })
}

/// Publishes `count` 64-byte records at QoS 1, the i-th to `topic(i)`,
/// and waits for every PUBACK.
pub fn publish_backlog(
    address: SocketAddr,
    client_id: &str,
    count: u64,
    topic: impl Fn(u64) -> String,
) -> Result<(), String> {
    publish_backlog_sized(address, client_id, count, 64, topic)
}

/// As [`publish_backlog`], each record `payload_bytes` long.
pub fn publish_backlog_sized(
    address: SocketAddr,
    client_id: &str,
    count: u64,
    payload_bytes: usize,
    topic: impl Fn(u64) -> String,
) -> Result<(), String> {
    let jobs = count;
    let mut producer = Client::connect(address, client_id, &OPTIONS)?;
    let (mut sent, mut acked) = (0u64, 0u64);
    let deadline = Instant::now() + RUN_TIMEOUT;
    while acked < jobs {
        while sent < jobs && sent - acked < PUBLISH_WINDOW as u64 {
            producer.queue(&Packet::Publish(Publish {
                qos: QoS::AtLeastOnce,
                topic: topic(sent),
                packet_id: Some((sent % 60_000) as u16 + 1),
                payload: vec![b'j'; payload_bytes],
                ..Publish::default()
            }));
            sent += 1;
        }
        producer.flush()?;
        while let Some(packet) = producer.next_packet()? {
            match packet {
                Packet::Puback(ack) if ack.reason_code.0 == 0 => acked += 1,
                other => return Err(format!("backlog publish answered {other:?}")),
            }
        }
        if Instant::now() > deadline {
            return Err(format!("backlog: {acked} of {jobs} acknowledged in time"));
        }
        if acked < jobs {
            producer.fill()?;
        }
    }
    producer.disconnect();
    Ok(())
}

/// Drains a backlog of `jobs` with `workers` workers; returns how long,
/// from the first SUBSCRIBE to the last answer taken.
pub fn drain(
    address: SocketAddr,
    tag: &str,
    jobs: u64,
    workers: usize,
) -> Result<Duration, String> {
    let mut clients = Vec::with_capacity(workers);
    for w in 0..workers {
        clients.push(Client::connect(address, &format!("{tag}-w{w}"), &OPTIONS)?);
    }
    let started = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|client| std::thread::spawn(move || work(client)))
        .collect();
    let mut seen = HashSet::new();
    let mut answered_at = started;
    for handle in handles {
        let (offsets, last) = handle
            .join()
            .map_err(|_| "a worker panicked".to_string())??;
        for offset in offsets {
            if !seen.insert(offset) {
                return Err(format!("job {offset} went to two workers"));
            }
        }
        answered_at = answered_at.max(last);
    }
    if seen.len() as u64 != jobs {
        return Err(format!("{} of {jobs} jobs drained", seen.len()));
    }
    Ok(answered_at - started)
}

/// One worker: answers every job until none comes for a while; returns
/// the offsets it took and when its last answer was taken.
fn work(mut client: Client) -> Result<(Vec<u64>, Instant), String> {
    client.subscribe(&format!("$saguin/queue/{QUEUE_NAME}"), QoS::AtLeastOnce)?;
    let response = format!("$saguin/queue/{QUEUE_NAME}/response");
    let mut offsets = Vec::new();
    let mut outstanding = 0u64;
    let mut last = Instant::now();
    let mut quiet_since = Instant::now();
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut answer_id = 0u16;
    loop {
        while let Some(packet) = client.next_packet()? {
            quiet_since = Instant::now();
            match packet {
                Packet::Publish(job) => {
                    let offset = job
                        .properties
                        .user_properties
                        .iter()
                        .find(|(k, _)| k == "saguin-offset")
                        .and_then(|(_, v)| v.parse::<u64>().ok())
                        .ok_or("a job without saguin-offset")?;
                    offsets.push(offset);
                    answer_id = answer_id % 60_000 + 1;
                    client.queue(&Packet::Publish(Publish {
                        qos: QoS::AtLeastOnce,
                        topic: response.clone(),
                        packet_id: Some(answer_id),
                        payload: b"ack".to_vec(),
                        properties: Properties {
                            correlation_data: job.properties.correlation_data.clone(),
                            ..Properties::default()
                        },
                        ..Publish::default()
                    }));
                    client.queue_puback(job.packet_id.ok_or("a job at QoS 0")?);
                    outstanding += 1;
                }
                Packet::Puback(_) => {
                    outstanding -= 1;
                    last = Instant::now();
                }
                other => return Err(format!("a worker was sent {other:?}")),
            }
        }
        client.flush()?;
        // Done once nothing has come for a second (five offer ticks) and
        // every answer has been taken.
        if outstanding == 0 && quiet_since.elapsed() > Duration::from_secs(1) {
            client.disconnect();
            return Ok((offsets, last));
        }
        if Instant::now() > deadline {
            return Err("a worker ran out of time".into());
        }
        client.fill()?;
    }
}
