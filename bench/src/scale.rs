//! Figure 16, saguin beside mosquitto at scale: resident memory per idle
//! MQTT 5 connection with 10,000 of them on the Raspberry Pi 4 profile
//! (16a); a storm of new connections over TCP (16b) and TLS (16c) while a
//! bystander publishes; and a durable append channel fed by a libmosquitto
//! publisher while a libmosquitto subscriber reads it live (16d).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use saguin::codec::ProtocolVersion;

use crate::brokers::{Broker, BrokerBinaries, BrokerKind, MosquittoSetup, SaguinSetup, TempDir};
use crate::client::{Client, ClientOptions, Endpoint};
use crate::report::{self, Better, Row, Sample, Unit};
use crate::storm::{self, Storm};
use crate::{open_files, stock, tls, worst_case, BETWEEN_RUNS};

/// The profile of figure 16a, as shipped.
const PI4_PROFILE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../boards/raspberry-pi-4.yaml"
));
/// `max_connections` in that profile: figure 16a raises it in steps of
/// this many until the idle clients fit.
const PI4_MAX_CONNECTIONS: usize = 1000;
/// Time for a broker to finish allocating before its memory is read.
const SETTLE: Duration = Duration::from_secs(1);
/// Descriptors a process needs beyond one per connection (its listener,
/// storage files, standard streams, the bench's own pipes).
const SPARE_FILES: u64 = 256;
/// Publishes in flight from figure 16d's publisher.
pub const LIVE_IN_FLIGHT: u64 = 16;
/// Payload of figure 16d's messages (mosq_pub's default).
pub const LIVE_PAYLOAD_BYTES: usize = 64;
/// How long a storm lasts at full size.
const STORM_SECONDS: u64 = 3;

/// How much figure 16 does.
#[derive(Clone, Copy, Debug)]
pub struct ScalePlan {
    pub runs: usize,
    pub idle_connections: usize,
    pub storm: Storm,
    pub live_messages: u64,
}

impl ScalePlan {
    /// 10,000 idle connections and a storm of 1,000 a second unless told
    /// otherwise (`--connections`, `--storm-rate`); `--quick` makes 1,000
    /// and 300 the defaults and sends fewer live messages.
    pub fn new(
        runs: usize,
        quick: bool,
        idle_connections: Option<usize>,
        storm_rate_per_s: Option<u32>,
    ) -> ScalePlan {
        ScalePlan {
            runs,
            idle_connections: idle_connections.unwrap_or(if quick { 1_000 } else { 10_000 }),
            storm: Storm {
                rate_per_s: storm_rate_per_s.unwrap_or(if quick { 300 } else { 1_000 }),
                duration: Duration::from_secs(STORM_SECONDS),
            },
            live_messages: if quick { 5_000 } else { 20_000 },
        }
    }

    /// Descriptors one process needs for the largest of the figures.
    fn open_files_needed(&self) -> u64 {
        let most = self.idle_connections.max(self.storm.connections());
        most as u64 + SPARE_FILES
    }
}

/// `max_connections` for figure 16a's saguin: the profile's, raised in
/// whole steps of it until `clients` and the readiness probe fit.
fn pi4_max_connections(clients: usize) -> usize {
    (clients / PI4_MAX_CONNECTIONS + 1) * PI4_MAX_CONNECTIONS
}

/// The Raspberry Pi 4 profile with its door on loopback, its storage in
/// `dir`, no connect rate, and room for `clients`.
fn pi4_config(dir: &Path, clients: usize) -> String {
    let scale = pi4_max_connections(clients) as f64 / PI4_MAX_CONNECTIONS as f64;
    worst_case::driver::scaled_profile(PI4_PROFILE, dir, scale)
}

/// `(after − before) / connections`: what each connection added.
fn per_connection_bytes(before: u64, after: u64, connections: usize) -> f64 {
    (after as f64 - before as f64) / connections.max(1) as f64
}

fn storm_title(storm: &Storm, over: &str) -> String {
    format!(
        "{over}: a storm of {} connections/s for {} s, each CONNECT, SUBSCRIBE, one QoS 1 publish, then staying",
        report::with_thousands(f64::from(storm.rate_per_s)),
        storm.duration.as_secs()
    )
}

/// Figure 16's rows, in order.
pub fn run_figure(plan: &ScalePlan, binaries: &BrokerBinaries) -> Result<Vec<Row>, String> {
    // Without the descriptors, 16a to 16c fail with the reason and its fix.
    let blocker = match open_files::ensure(plan.open_files_needed()) {
        Ok(limit) => {
            println!("\n== 16. scale (open files limit {limit}, inherited by each broker)");
            None
        }
        Err(reason) => {
            println!("\n== 16. scale: 16a to 16c cannot run: {reason}");
            Some(reason)
        }
    };
    let blocker = blocker.as_deref();
    let mut rows = vec![idle_memory_row(plan, binaries, blocker)];
    let dir = TempDir::new("scale-tls")?;
    let served = tls::make_server_certificate(dir.path())?;
    let client = tls::client_config(&served.authority)?;
    for (over, tag, tls) in [
        ("16b. plain TCP", "16b", None),
        ("16c. TLS", "16c", Some((&served, client.clone()))),
    ] {
        rows.extend(storm_rows(plan, binaries, over, tag, tls, blocker)?);
    }
    rows.extend(live_consumer_rows(plan, binaries)?);
    Ok(rows)
}

/// 16a: a fresh broker per run, its memory read idle and then with the
/// idle clients connected.
fn idle_memory_row(plan: &ScalePlan, binaries: &BrokerBinaries, blocker: Option<&str>) -> Row {
    let n = plan.idle_connections;
    let title = format!(
        "16a. per idle MQTT 5 connection at {} connections, Raspberry Pi 4 profile: (with them − before) / {}",
        report::with_thousands(n as f64),
        report::with_thousands(n as f64),
    );
    println!("\n== {title}");
    let mut row = Row::new(title, Unit::Bytes, Better::Lower);
    if let Some(reason) = blocker {
        fail_all(std::slice::from_mut(&mut row), reason);
        return row;
    }
    for run in 1..=plan.runs {
        for kind in BrokerKind::BOTH {
            let prefix = format!("   run {run} {kind:<9}");
            match measure_idle(kind, binaries, n, &format!("s16a{run}{kind}")) {
                Ok((before, after)) => {
                    let each = per_connection_bytes(before, after, n);
                    println!(
                        "{prefix} before {}, with {n} clients {}, {each:.0} B per connection",
                        report::format_bytes(before as f64),
                        report::format_bytes(after as f64),
                    );
                    row.push(kind, Sample::Value(each));
                }
                Err(failure) => {
                    println!("{prefix} FAILED: {failure}");
                    row.push(kind, Sample::Failed(failure));
                }
            }
            std::thread::sleep(BETWEEN_RUNS);
        }
    }
    row
}

/// RSS of a fresh `kind` before and with `n` idle MQTT 5 clients.
fn measure_idle(
    kind: BrokerKind,
    binaries: &BrokerBinaries,
    n: usize,
    label: &str,
) -> Result<(u64, u64), String> {
    let broker = match kind {
        BrokerKind::Mosquitto => Broker::start(kind, binaries)?,
        BrokerKind::Saguin | BrokerKind::Baseline => {
            Broker::start_saguin_on(binaries, |dir| Ok(pi4_config(dir, n)), None)?
        }
    };
    std::thread::sleep(SETTLE);
    let before = broker.rss_bytes()?;
    let clients = connect_idle(&broker.endpoint(), n, label)?;
    std::thread::sleep(SETTLE);
    let after = broker.rss_bytes()?;
    for client in clients {
        client.disconnect();
    }
    broker.stop();
    Ok((before, after))
}

fn connect_idle(endpoint: &Endpoint, n: usize, label: &str) -> Result<Vec<Client>, String> {
    let options = ClientOptions {
        version: ProtocolVersion::V5,
        keep_alive_s: 600,
        receive_maximum: None,
    };
    (0..n)
        .map(|i| {
            Client::connect_to(endpoint, &format!("{label}-{i}"), &options)
                .map_err(|e| format!("idle client {i} of {n}: {e}"))
        })
        .collect()
}

/// 16b or 16c: one pair of brokers, alternating storms.
fn storm_rows(
    plan: &ScalePlan,
    binaries: &BrokerBinaries,
    over: &str,
    tag: &str,
    tls: Option<(&tls::ServerCertificate, Arc<ClientConfig>)>,
    blocker: Option<&str>,
) -> Result<[Row; 3], String> {
    let title = storm_title(&plan.storm, over);
    println!("\n== {title}");
    let mut rows = [
        Row::new(
            format!("{title}: connections accepted/s"),
            Unit::ConnectionsPerS,
            Better::Higher,
        ),
        Row::new(
            format!("{title}: CONNACK p99"),
            Unit::Microseconds,
            Better::Lower,
        ),
        Row::new(
            format!("{title}: a bystander's QoS 1 PUBACK p99 meanwhile"),
            Unit::Microseconds,
            Better::Lower,
        ),
    ];
    if let Some(reason) = blocker {
        fail_all(&mut rows, reason);
        return Ok(rows);
    }
    // Room for every storm client, the bystander and the probe.
    let max_connections = plan.storm.connections() + 100;
    let mut brokers = Vec::new();
    for kind in BrokerKind::BOTH {
        brokers.push(Broker::start_admitting(
            kind,
            binaries,
            max_connections,
            tls.clone(),
        )?);
    }
    for run in 1..=plan.runs {
        for broker in &brokers {
            let prefix = format!("   run {run} {:<9}", broker.kind);
            let label = format!("s{tag}r{run}{}", broker.kind);
            match storm::run(&broker.endpoint(), &plan.storm, &label) {
                Ok(outcome) => {
                    println!(
                        "{prefix} {} connections at {:.0}/s; CONNACK p50 {:.0} µs, p99 {:.0} µs; \
                         bystander p99 {:.0} µs over {} publishes",
                        outcome.connections,
                        outcome.accepted_per_s,
                        outcome.connack_p50_us,
                        outcome.connack_p99_us,
                        outcome.bystander_p99_us,
                        outcome.bystander_samples
                    );
                    let values = [
                        outcome.accepted_per_s,
                        outcome.connack_p99_us,
                        outcome.bystander_p99_us,
                    ];
                    for (row, value) in rows.iter_mut().zip(values) {
                        row.push(broker.kind, Sample::Value(value));
                    }
                }
                Err(failure) => {
                    println!("{prefix} FAILED: {failure}");
                    for row in rows.iter_mut() {
                        row.push(broker.kind, Sample::Failed(failure.clone()));
                    }
                }
            }
            std::thread::sleep(BETWEEN_RUNS);
        }
    }
    for broker in brokers {
        broker.stop();
    }
    Ok(rows)
}

/// 16d: a fresh pair of brokers each run, set up as for figure 9, a
/// libmosquitto subscriber on the topic while the publisher runs.
fn live_consumer_rows(plan: &ScalePlan, binaries: &BrokerBinaries) -> Result<[Row; 2], String> {
    let title = format!(
        "16d. libmosquitto publisher ({LIVE_IN_FLIGHT} in flight) → a libmosquitto subscriber at its defaults, \
         {LIVE_PAYLOAD_BYTES} B QoS 1, fresh broker (saguin: durable append; mosquitto: not durable)"
    );
    println!("\n== {title}");
    let mut rows = [
        Row::new(
            format!("{title}: deliveries/s"),
            Unit::MessagesPerS,
            Better::Higher,
        ),
        Row::new(
            format!("{title}: end-to-end p50"),
            Unit::Microseconds,
            Better::Lower,
        ),
    ];
    let clients = match stock::StockClients::prepare() {
        Ok(clients) => clients,
        Err(reason) => {
            println!("   FAILED: {reason}");
            fail_all(&mut rows, &reason);
            return Ok(rows);
        }
    };
    for run in 1..=plan.runs {
        for kind in BrokerKind::BOTH {
            let prefix = format!("   run {run} {kind:<9}");
            let broker =
                Broker::start_as(kind, binaries, SaguinSetup::Stock, MosquittoSetup::Stock)?;
            let topic = format!("durable/live/{run}");
            match clients.live_consumer(&broker, &topic, plan.live_messages, LIVE_IN_FLIGHT) {
                Ok(consumed) => {
                    println!(
                        "{prefix} {:>10} deliveries/s, end-to-end p50 {:.0} µs, p99 {:.0} µs",
                        report::with_thousands(consumed.per_s),
                        consumed.p50_us,
                        consumed.p99_us
                    );
                    rows[0].push(kind, Sample::Value(consumed.per_s));
                    rows[1].push(kind, Sample::Value(consumed.p50_us));
                }
                Err(failure) => {
                    println!("{prefix} FAILED: {failure}");
                    for row in rows.iter_mut() {
                        row.push(kind, Sample::Failed(failure.clone()));
                    }
                }
            }
            broker.stop();
            std::thread::sleep(BETWEEN_RUNS);
        }
    }
    Ok(rows)
}

/// Records `reason` as the one failed run of each broker in `rows`.
fn fail_all(rows: &mut [Row], reason: &str) {
    for row in rows {
        for kind in BrokerKind::BOTH {
            row.push(kind, Sample::Failed(reason.to_string()));
        }
    }
}

/// How figure 16 is taken, for BENCHMARKS.md.
pub fn method_notes(plan: &ScalePlan) -> String {
    let n = |count: f64| report::with_thousands(count);
    format!(
        "- Scale (figure 16), a fresh broker or pair for each part, alternating runs. The bench \
         makes its soft open files limit at least {files} first (setrlimit, within the hard limit), and \
         each broker it starts inherits it. 16a: resident memory (VmRSS) of a fresh broker a \
         second after it answers, and again a second after {idle} idle MQTT 5 clients (keepalive \
         600 s, clean start, one TCP connection each, made one after another by the bench) have \
         their CONNACKs; the figure is the difference over {idle}. saguin runs \
         `boards/raspberry-pi-4.yaml` with its door on 127.0.0.1:0, its redb file in its \
         temporary directory, `max_connect_rate: none` and `max_connections` (with \
         `max_persistent_sessions`) raised from 1,000 to {pi4_max}; mosquitto runs as in figures 1 \
         to 5, `max_connections -1`. 16b and 16c: {storm_n} new MQTT 5 clients due at {rate} a \
         second for {seconds} s, from {threads} threads (client i from thread i mod {threads}, at \
         its due time or at once when its thread is late); each connects (16c: TCP, then a full \
         TLS handshake with no session to resume, figure 13's certificate and client), subscribes \
         to its own `storm/.../cmd` at QoS 1, publishes one {storm_payload}-byte QoS 1 message \
         to its own `storm/.../up` and waits for the PUBACK, then stays connected until the storm \
         is over; nothing is delivered to them. Accepted/s is the clients over the time from the \
         first due time to the last CONNACK; the CONNACK p99 is over every client, from its TCP \
         connect to its CONNACK. A bystander connected before the storm publishes at QoS 1 every \
         {period:?}, one at a time, and its PUBACK round trips give its p99. saguin runs figure \
         1's (16b) or figure 13's (16c) configuration with `max_connections: {storm_max}`; \
         mosquitto figure 1's or 13's. 16d: one `bench/mosq/mosq_pub.c` publisher (libmosquitto, \
         MQTT 3.1.1, Nagle on) sending {live} {live_payload}-byte QoS 1 messages to \
         `durable/live/<run>` with at most {in_flight} unacknowledged, and one \
         `bench/mosq/mosq_sub.c` subscriber (libmosquitto at its defaults: MQTT 3.1.1, clean \
         session, QoS 1) on that topic from before the first publish; brokers as in figure 9, so \
         saguin appends each record to its redb channel and acknowledges it once committed, \
         mosquitto delivers it at plain QoS 1 without persistence; a fresh pair every run, no \
         warm-up. Deliveries/s is the messages over the time from the first one's send stamp to \
         the last arrival; a message's latency is its arrival at the subscriber minus the \
         CLOCK_MONOTONIC stamp the publisher put in its payload.\n",
        files = n(plan.open_files_needed() as f64),
        idle = n(plan.idle_connections as f64),
        pi4_max = n(pi4_max_connections(plan.idle_connections) as f64),
        storm_n = n(plan.storm.connections() as f64),
        rate = n(f64::from(plan.storm.rate_per_s)),
        seconds = plan.storm.duration.as_secs(),
        threads = storm::STORM_THREADS,
        storm_payload = storm::STORM_PAYLOAD_BYTES,
        period = crate::auth_storm::BYSTANDER_PERIOD,
        storm_max = plan.storm.connections() + 100,
        live = n(plan.live_messages as f64),
        live_payload = LIVE_PAYLOAD_BYTES,
        in_flight = LIVE_IN_FLIGHT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pi4_profile_admits_the_idle_clients_and_the_probe() {
        assert_eq!(pi4_max_connections(300), 1000);
        assert_eq!(pi4_max_connections(999), 1000);
        assert_eq!(pi4_max_connections(1000), 2000);
        assert_eq!(pi4_max_connections(10_000), 11_000);
        let config = pi4_config(Path::new("/tmp/x"), 10_000);
        assert!(config.contains("max_connections: 11000"), "{config}");
        assert!(config.contains("max_connect_rate: none"), "{config}");
        assert!(config.contains("file_path: /tmp/x/saguin.redb"), "{config}");
        assert!(config.contains("address: 127.0.0.1:0"), "{config}");
    }

    #[test]
    fn without_the_descriptors_the_parts_fail_with_the_reason_and_start_nothing() {
        let plan = ScalePlan::new(2, true, Some(300), Some(100));
        let nowhere = BrokerBinaries {
            saguin: "/nonexistent/saguin".into(),
            mosquitto: "/nonexistent/mosquitto".into(),
            baseline: None,
        };
        let reason = "the hard limit is 1024";
        let mut rows = vec![idle_memory_row(&plan, &nowhere, Some(reason))];
        rows.extend(
            storm_rows(&plan, &nowhere, "16b", "16b", None, Some(reason))
                .expect("no broker is started"),
        );
        for row in &rows {
            assert!(row.median_cell(BrokerKind::Saguin).contains("FAILED"));
        }
        // One failed run of each broker for each of the four rows.
        let failures = report::failure_lines(&rows);
        assert_eq!(failures.len(), 8, "{failures:?}");
        assert!(failures.iter().all(|line| line.ends_with(reason)));
    }

    #[test]
    fn a_connection_costs_the_growth_over_the_count() {
        assert_eq!(per_connection_bytes(6_000_000, 13_370_000, 10_000), 737.0);
        assert_eq!(per_connection_bytes(8_000, 4_000, 4), -1000.0);
        assert_eq!(per_connection_bytes(1, 2, 0), 1.0);
    }

    #[test]
    fn the_open_files_cover_the_largest_part() {
        let plan = ScalePlan::new(1, true, Some(300), Some(1000));
        assert_eq!(plan.open_files_needed(), 3000 + SPARE_FILES);
        let plan = ScalePlan::new(1, true, None, None);
        assert_eq!(plan.idle_connections, 1_000);
        assert_eq!(plan.storm.connections(), 900);
        let plan = ScalePlan::new(1, false, None, None);
        assert_eq!(plan.idle_connections, 10_000);
        assert_eq!(plan.storm.connections(), 3000);
        assert_eq!(plan.open_files_needed(), 10_000 + SPARE_FILES);
    }
}
