//! The load generator: publisher and subscriber threads, one per
//! connection, that count and check every message end to end.
//!
//! Each payload carries a sequence number and the time it was sent, read on
//! one process-wide clock, so a subscriber can tell a missing message from a
//! duplicate and measure latency without any clock skew.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use saguin::codec::{Packet, ProtocolVersion, Publish, QoS};

use crate::client::{Client, ClientOptions, Endpoint, READ_POLL};

pub const PAYLOAD_BYTES: usize = 64;
/// Most unacknowledged QoS 1 publishes a publisher keeps, and the Receive
/// Maximum each subscriber announces (mosquitto is set to the same).
pub const QOS1_WINDOW_MESSAGES: u16 = 100;
/// Most messages all publishers together may be ahead of the slowest
/// subscriber, at any QoS. A broker acknowledges a QoS 1 publish when it
/// arrives, not when it is delivered, so the ack window alone lets
/// publishers fill a subscriber's queue until the broker is right to drop
/// (mosquitto at max_queued_messages, in fan-in); QoS 0 has no
/// acknowledgement at all.
pub const END_TO_END_WINDOW_MESSAGES: u64 = 1000;
/// Subscribers wake a waiting publisher after this many messages.
const PROGRESS_STEP_MESSAGES: u64 = 250;
/// A run fails when no message moves for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A run fails when it takes longer than this in all.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest the clients may take to connect and subscribe.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
const GATE_POLL: Duration = Duration::from_millis(1);
/// How often a paced publisher with a full window checks for acks.
const WINDOW_POLL: Duration = Duration::from_micros(100);

/// The instant every payload timestamp counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// Payload layout: sequence number, then send time, then filler.
fn stamp_payload(payload: &mut [u8], seq: u64) {
    payload[0..8].copy_from_slice(&seq.to_le_bytes());
    payload[8..16].copy_from_slice(&nanos_since_epoch().to_le_bytes());
}

fn payload_seq(payload: &[u8]) -> Result<u64, String> {
    let bytes = payload
        .get(0..8)
        .ok_or_else(|| format!("a {}-byte payload is not the bench's", payload.len()))?;
    Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
}

fn payload_age_us(payload: &[u8]) -> Option<u64> {
    let sent_ns = u64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some(nanos_since_epoch().saturating_sub(sent_ns) / 1000)
}

/// One PUBLISH packet rewritten in place for each message, so the load
/// generator allocates nothing per message.
struct PublishPacket(Packet);

impl PublishPacket {
    fn new(topic: &str, qos: QoS) -> PublishPacket {
        PublishPacket(Packet::Publish(Publish {
            qos,
            topic: topic.to_string(),
            payload: vec![0xA5; PAYLOAD_BYTES],
            ..Publish::default()
        }))
    }

    /// The packet for message `seq`, stamped with the time now.
    fn stamped(&mut self, seq: u64, packet_id: Option<u16>) -> &Packet {
        if let Packet::Publish(publish) = &mut self.0 {
            stamp_payload(&mut publish.payload, seq);
            publish.packet_id = packet_id;
        }
        &self.0
    }
}

/// Bench clients speak MQTT 5 so that their Receive Maximum, not a broker
/// default, bounds the QoS 1 deliveries in flight towards them.
fn client_options() -> ClientOptions {
    ClientOptions {
        version: ProtocolVersion::V5,
        keep_alive_s: 600,
        receive_maximum: Some(QOS1_WINDOW_MESSAGES),
    }
}

/// Holds every client until all have connected and subscribed, so that
/// no publish can race a subscription; any client failing first aborts all.
struct Gate {
    arrived: AtomicUsize,
    opened_at: OnceLock<Instant>,
    aborted: AtomicBool,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            arrived: AtomicUsize::new(0),
            opened_at: OnceLock::new(),
            aborted: AtomicBool::new(false),
        }
    }

    /// Waits for the gate to open; `None` when the run was aborted.
    fn arrive_and_wait(&self, deadline: Instant) -> Option<Instant> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        loop {
            if let Some(opened_at) = self.opened_at.get() {
                return Some(*opened_at);
            }
            if self.is_aborted() || Instant::now() >= deadline {
                return None;
            }
            thread::sleep(GATE_POLL);
        }
    }

    /// Opens once `clients` have arrived; aborts the run at `deadline`.
    fn open_when_arrived(&self, clients: usize, deadline: Instant) -> Option<Instant> {
        while self.arrived.load(Ordering::SeqCst) < clients {
            if self.is_aborted() {
                return None;
            }
            if Instant::now() >= deadline {
                self.abort();
                return None;
            }
            thread::sleep(GATE_POLL);
        }
        Some(*self.opened_at.get_or_init(Instant::now))
    }

    fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
    }

    fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

/// What subscribers have received, for publishers to stay within
/// `END_TO_END_WINDOW_MESSAGES` of the slowest one.
struct Progress {
    unique_per_subscriber: Vec<AtomicU64>,
    sent_total: AtomicU64,
    wake: (Mutex<()>, Condvar),
}

impl Progress {
    fn new(subscribers: usize) -> Progress {
        Progress {
            unique_per_subscriber: (0..subscribers).map(|_| AtomicU64::new(0)).collect(),
            sent_total: AtomicU64::new(0),
            wake: (Mutex::new(()), Condvar::new()),
        }
    }

    fn report(&self, subscriber: usize, unique: u64) {
        let previous = self.unique_per_subscriber[subscriber].swap(unique, Ordering::SeqCst);
        if previous / PROGRESS_STEP_MESSAGES != unique / PROGRESS_STEP_MESSAGES {
            self.wake.1.notify_all();
        }
    }

    fn slowest_unique(&self) -> u64 {
        self.unique_per_subscriber
            .iter()
            .map(|count| count.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// How many more messages may be sent now (0 when the window is full).
    fn room(&self) -> u64 {
        let ahead = self
            .sent_total
            .load(Ordering::SeqCst)
            .saturating_sub(self.slowest_unique());
        END_TO_END_WINDOW_MESSAGES.saturating_sub(ahead)
    }

    /// Waits for room in the window; the timed wait also covers a wake-up
    /// that slipped between `room` and the wait. Fails when the slowest
    /// subscriber has not moved since `stalled_since` for `STALL_TIMEOUT`.
    fn wait_for_room(&self, stalled_since: Instant) -> Result<u64, String> {
        loop {
            let room = self.room();
            if room > 0 {
                return Ok(room);
            }
            if stalled_since.elapsed() >= STALL_TIMEOUT {
                return Err(format!(
                    "the subscribers stayed {END_TO_END_WINDOW_MESSAGES} messages behind for \
                     {STALL_TIMEOUT:?} (messages lost)"
                ));
            }
            let guard = self.wake.0.lock().unwrap_or_else(|e| e.into_inner());
            let _ = self.wake.1.wait_timeout(guard, Duration::from_millis(5));
        }
    }

    fn add_sent(&self, messages: u64) {
        self.sent_total.fetch_add(messages, Ordering::SeqCst);
    }
}

/// What every client thread of one run shares.
struct Run {
    gate: Gate,
    progress: Progress,
    deadline: Instant,
}

impl Run {
    fn new(subscribers: usize) -> Run {
        Run {
            gate: Gate::new(),
            progress: Progress::new(subscribers),
            deadline: Instant::now() + RUN_TIMEOUT,
        }
    }

    /// Fails when the run is out of time or another client failed.
    fn check(&self, what: &str) -> Result<(), String> {
        if self.gate.is_aborted() {
            return Err(format!("{what}: stopped because another client failed"));
        }
        if Instant::now() >= self.deadline {
            return Err(format!("{what}: the run took longer than {RUN_TIMEOUT:?}"));
        }
        Ok(())
    }
}

/// A throughput figure's shape.
#[derive(Clone, Debug)]
pub struct Throughput {
    pub qos: QoS,
    pub publishers: usize,
    pub subscribers: usize,
    pub messages_per_publisher: u64,
    pub topics: Topics,
}

/// Where a run publishes, and what its subscribers subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topics {
    /// `bench/<run>`, subscribed by name.
    PerRun,
    /// `durable/<run>`, subscribed as `durable/#`: the filter saguin's
    /// append channel claims in figure 6 (runs follow one another, so the
    /// wildcard only ever sees the current run's messages).
    Durable,
}

impl Topics {
    /// The topic published to, and the filter subscribed to.
    fn for_run(self, run_label: &str) -> (String, String) {
        match self {
            Topics::PerRun => {
                let topic = format!("bench/{run_label}");
                (topic.clone(), topic)
            }
            Topics::Durable => (
                format!("durable/{run_label}"),
                crate::brokers::DURABLE_FILTER.to_string(),
            ),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ThroughputOutcome {
    /// Distinct messages received, summed over subscribers.
    pub delivered: u64,
    pub expected: u64,
    pub duplicates: u64,
    /// From the gate opening to the last subscriber's last message.
    pub elapsed: Duration,
    pub failure: Option<String>,
}

impl ThroughputOutcome {
    pub fn delivered_per_s(&self) -> f64 {
        self.delivered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// One publisher's part of the sequence-number space.
struct PublisherPlan {
    client_id: String,
    topic: String,
    qos: QoS,
    first_seq: u64,
    count: u64,
}

/// One subscriber's job.
struct SubscriberPlan {
    index: usize,
    client_id: String,
    /// The filter subscribed to.
    topic: String,
    qos: QoS,
    /// Sequence numbers run from 0 to this, exclusive.
    expected: u64,
    /// Latency is sampled for sequence numbers from this one on.
    latency_from_seq: Option<u64>,
}

#[derive(Default)]
struct SubscriberOutcome {
    unique: u64,
    duplicates: u64,
    last_receive: Option<Instant>,
    latencies_us: Vec<u64>,
    failure: Option<String>,
}

/// Runs `load` against the broker at `address`; `run_label` keeps client
/// ids and the topic apart from every other run's.
pub fn run_throughput(
    endpoint: &Endpoint,
    load: &Throughput,
    run_label: &str,
) -> ThroughputOutcome {
    let run = Run::new(load.subscribers);
    let (topic, filter) = load.topics.for_run(run_label);
    let expected = load.messages_per_publisher * load.publishers as u64;
    let (opened_at, subscribers, publisher_failures) = thread::scope(|scope| {
        let subscriber_threads: Vec<_> = (0..load.subscribers)
            .map(|index| {
                let plan = SubscriberPlan {
                    index,
                    client_id: format!("{run_label}-sub{index}"),
                    topic: filter.clone(),
                    qos: load.qos,
                    expected,
                    latency_from_seq: None,
                };
                let run = &run;
                scope.spawn(move || run_subscriber(endpoint, &plan, run))
            })
            .collect();
        let publisher_threads: Vec<_> = (0..load.publishers)
            .map(|index| {
                let plan = PublisherPlan {
                    client_id: format!("{run_label}-pub{index}"),
                    topic: topic.clone(),
                    qos: load.qos,
                    first_seq: index as u64 * load.messages_per_publisher,
                    count: load.messages_per_publisher,
                };
                let run = &run;
                scope.spawn(move || run_publisher(endpoint, &plan, run))
            })
            .collect();
        let clients = load.publishers + load.subscribers;
        let opened_at = run
            .gate
            .open_when_arrived(clients, Instant::now() + SETUP_TIMEOUT);
        let publisher_failures: Vec<String> = publisher_threads
            .into_iter()
            .filter_map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("publisher panicked".into()))
                    .err()
            })
            .collect();
        let subscribers: Vec<SubscriberOutcome> = subscriber_threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| failed_subscriber("subscriber panicked"))
            })
            .collect();
        (opened_at, subscribers, publisher_failures)
    });
    summarise_throughput(opened_at, expected, &subscribers, publisher_failures)
}

fn failed_subscriber(reason: &str) -> SubscriberOutcome {
    SubscriberOutcome {
        failure: Some(reason.to_string()),
        ..SubscriberOutcome::default()
    }
}

/// Any failure, or any subscriber short of a message, fails the run.
fn summarise_throughput(
    opened_at: Option<Instant>,
    expected_per_subscriber: u64,
    subscribers: &[SubscriberOutcome],
    publisher_failures: Vec<String>,
) -> ThroughputOutcome {
    let delivered = subscribers.iter().map(|s| s.unique).sum();
    let duplicates = subscribers.iter().map(|s| s.duplicates).sum();
    let expected = expected_per_subscriber * subscribers.len() as u64;
    let last_receive = subscribers.iter().filter_map(|s| s.last_receive).max();
    let elapsed = match (opened_at, last_receive) {
        (Some(start), Some(end)) => end.saturating_duration_since(start),
        _ => Duration::ZERO,
    };
    let mut failures = publisher_failures;
    failures.extend(subscribers.iter().filter_map(|s| s.failure.clone()));
    if opened_at.is_none() && failures.is_empty() {
        failures.push("the clients did not all connect and subscribe in time".into());
    }
    if failures.is_empty() && delivered < expected {
        failures.push(format!("received {delivered} of {expected} messages"));
    }
    ThroughputOutcome {
        delivered,
        expected,
        duplicates,
        elapsed,
        failure: (!failures.is_empty()).then(|| failures.join("; ")),
    }
}

fn run_subscriber(endpoint: &Endpoint, plan: &SubscriberPlan, run: &Run) -> SubscriberOutcome {
    let mut outcome = SubscriberOutcome::default();
    if let Err(error) = subscribe_and_receive(endpoint, plan, run, &mut outcome) {
        run.gate.abort();
        outcome.failure = Some(format!("{}: {error}", plan.client_id));
    }
    outcome
}

fn subscribe_and_receive(
    endpoint: &Endpoint,
    plan: &SubscriberPlan,
    run: &Run,
    outcome: &mut SubscriberOutcome,
) -> Result<(), String> {
    let mut client = Client::connect_to(endpoint, &plan.client_id, &client_options())?;
    client.subscribe(&plan.topic, plan.qos)?;
    let Some(opened_at) = run.gate.arrive_and_wait(Instant::now() + SETUP_TIMEOUT) else {
        return Ok(());
    };
    receive_all(&mut client, plan, run, opened_at, outcome)?;
    client.disconnect();
    Ok(())
}

/// Reads until every sequence number has arrived, acknowledging QoS 1
/// deliveries one read's worth at a time.
fn receive_all(
    client: &mut Client,
    plan: &SubscriberPlan,
    run: &Run,
    opened_at: Instant,
    outcome: &mut SubscriberOutcome,
) -> Result<(), String> {
    let mut seen = vec![false; plan.expected as usize];
    let mut last_progress = opened_at;
    while outcome.unique < plan.expected {
        run.check("subscriber")?;
        if last_progress.elapsed() >= STALL_TIMEOUT {
            return Err(format!(
                "nothing arrived for {STALL_TIMEOUT:?}; received {} of {} messages",
                outcome.unique, plan.expected
            ));
        }
        client.fill()?;
        let received_before = outcome.unique + outcome.duplicates;
        while let Some(packet) = client.next_packet()? {
            if let Packet::Publish(publish) = packet {
                record_delivery(&publish, plan, &mut seen, outcome)?;
                if let Some(packet_id) = publish.packet_id {
                    client.queue_puback(packet_id);
                }
            }
        }
        client.flush()?;
        if outcome.unique + outcome.duplicates > received_before {
            last_progress = Instant::now();
            outcome.last_receive = Some(last_progress);
            run.progress.report(plan.index, outcome.unique);
        }
    }
    Ok(())
}

fn record_delivery(
    publish: &Publish,
    plan: &SubscriberPlan,
    seen: &mut [bool],
    outcome: &mut SubscriberOutcome,
) -> Result<(), String> {
    if publish.qos != plan.qos {
        return Err(format!(
            "delivered at {:?}, subscribed at {:?}",
            publish.qos, plan.qos
        ));
    }
    let seq = payload_seq(&publish.payload)?;
    let slot = seen
        .get_mut(seq as usize)
        .ok_or_else(|| format!("sequence number {seq} was never sent"))?;
    if std::mem::replace(slot, true) {
        outcome.duplicates += 1;
        return Ok(());
    }
    outcome.unique += 1;
    if plan.latency_from_seq.is_some_and(|from| seq >= from) {
        if let Some(age_us) = payload_age_us(&publish.payload) {
            outcome.latencies_us.push(age_us);
        }
    }
    Ok(())
}

fn run_publisher(endpoint: &Endpoint, plan: &PublisherPlan, run: &Run) -> Result<(), String> {
    publish_all(endpoint, plan, run).map_err(|error| {
        run.gate.abort();
        format!("{}: {error}", plan.client_id)
    })
}

fn publish_all(endpoint: &Endpoint, plan: &PublisherPlan, run: &Run) -> Result<(), String> {
    let mut client = Client::connect_to(endpoint, &plan.client_id, &client_options())?;
    if run
        .gate
        .arrive_and_wait(Instant::now() + SETUP_TIMEOUT)
        .is_none()
    {
        return Ok(());
    }
    match plan.qos {
        QoS::AtMostOnce => publish_qos0(&mut client, plan, run)?,
        _ => publish_qos1(&mut client, plan, run)?,
    }
    client.disconnect();
    Ok(())
}

/// Sends in bursts as large as the end-to-end window allows.
fn publish_qos0(client: &mut Client, plan: &PublisherPlan, run: &Run) -> Result<(), String> {
    let mut publish = PublishPacket::new(&plan.topic, QoS::AtMostOnce);
    let end_seq = plan.first_seq + plan.count;
    let mut next_seq = plan.first_seq;
    while next_seq < end_seq {
        run.check("publisher")?;
        let room = run.progress.wait_for_room(Instant::now())?;
        let burst = room.min(end_seq - next_seq);
        for seq in next_seq..next_seq + burst {
            client.queue(publish.stamped(seq, None));
        }
        run.progress.add_sent(burst);
        client.flush()?;
        next_seq += burst;
    }
    Ok(())
}

/// Keeps up to `QOS1_WINDOW_MESSAGES` unacknowledged publishes on the wire,
/// within the end-to-end window, until every one is acknowledged.
fn publish_qos1(client: &mut Client, plan: &PublisherPlan, run: &Run) -> Result<(), String> {
    let mut publish = PublishPacket::new(&plan.topic, QoS::AtLeastOnce);
    let mut window = AckWindow::new();
    let end_seq = plan.first_seq + plan.count;
    let mut next_seq = plan.first_seq;
    let mut acked = 0;
    let mut last_ack_at = Instant::now();
    while acked < plan.count {
        run.check("publisher")?;
        let burst = run
            .progress
            .room()
            .min(u64::from(QOS1_WINDOW_MESSAGES - window.in_flight))
            .min(end_seq - next_seq);
        for seq in next_seq..next_seq + burst {
            let packet_id = window.open();
            client.queue(publish.stamped(seq, Some(packet_id)));
        }
        run.progress.add_sent(burst);
        next_seq += burst;
        client.flush()?;
        if window.in_flight == 0 {
            // Nothing to be acknowledged: only the subscribers can make room.
            run.progress.wait_for_room(Instant::now())?;
            last_ack_at = Instant::now();
            continue;
        }
        client.fill()?;
        let acked_before = acked;
        while let Some(packet) = client.next_packet()? {
            if let Packet::Puback(puback) = packet {
                window.close(puback.packet_id, puback.reason_code.0)?;
                acked += 1;
            }
        }
        if acked > acked_before {
            last_ack_at = Instant::now();
        } else if last_ack_at.elapsed() >= STALL_TIMEOUT {
            return Err(format!(
                "no PUBACK for {STALL_TIMEOUT:?}; {acked} of {} acknowledged",
                plan.count
            ));
        }
    }
    Ok(())
}

/// Packet ids of unacknowledged QoS 1 publishes.
struct AckWindow {
    open_ids: Vec<bool>,
    next_id: u16,
    in_flight: u16,
}

impl AckWindow {
    fn new() -> AckWindow {
        AckWindow {
            open_ids: vec![false; usize::from(u16::MAX) + 1],
            next_id: 1,
            in_flight: 0,
        }
    }

    /// The id for the next publish. Ids cycle through 1..=65535; with at
    /// most 100 in flight one is never reused while still open.
    fn open(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        self.open_ids[usize::from(id)] = true;
        self.in_flight += 1;
        id
    }

    fn close(&mut self, packet_id: u16, reason_code: u8) -> Result<(), String> {
        // 0x10 "no matching subscribers" would mean a subscription was lost.
        if reason_code != 0 {
            return Err(format!(
                "PUBACK {packet_id} with reason code 0x{reason_code:02X}"
            ));
        }
        if !std::mem::replace(&mut self.open_ids[usize::from(packet_id)], false) {
            return Err(format!(
                "PUBACK for packet id {packet_id}, which was not in flight"
            ));
        }
        self.in_flight -= 1;
        Ok(())
    }
}

/// The latency figure's shape: QoS 1, one publisher, one subscriber.
#[derive(Clone, Debug)]
pub struct Latency {
    pub rate_per_s: u32,
    pub duration: Duration,
}

#[derive(Clone, Debug)]
pub struct LatencyOutcome {
    pub p50_us: f64,
    pub p99_us: f64,
    pub samples: usize,
    pub failure: Option<String>,
}

/// The first twentieth of a latency run warms the path and is not sampled.
const LATENCY_WARMUP_DIVISOR: u64 = 20;

/// Publishes at a fixed rate and measures each message's age on arrival.
pub fn run_latency(endpoint: &Endpoint, load: &Latency, run_label: &str) -> LatencyOutcome {
    let run = Run::new(1);
    let count = (u64::from(load.rate_per_s) as f64 * load.duration.as_secs_f64()) as u64;
    let subscriber_plan = SubscriberPlan {
        index: 0,
        client_id: format!("{run_label}-sub0"),
        topic: format!("bench/{run_label}"),
        qos: QoS::AtLeastOnce,
        expected: count,
        latency_from_seq: Some(count / LATENCY_WARMUP_DIVISOR),
    };
    let publisher_plan = PublisherPlan {
        client_id: format!("{run_label}-pub0"),
        topic: subscriber_plan.topic.clone(),
        qos: QoS::AtLeastOnce,
        first_seq: 0,
        count,
    };
    let period = Duration::from_secs(1) / load.rate_per_s.max(1);
    let (subscriber, publisher_result) = thread::scope(|scope| {
        let subscriber = scope.spawn(|| run_subscriber(endpoint, &subscriber_plan, &run));
        let publisher =
            scope.spawn(|| run_paced_publisher(endpoint, &publisher_plan, period, &run));
        run.gate
            .open_when_arrived(2, Instant::now() + SETUP_TIMEOUT);
        let publisher_result = publisher
            .join()
            .unwrap_or_else(|_| Err("publisher panicked".into()));
        let subscriber = subscriber
            .join()
            .unwrap_or_else(|_| failed_subscriber("subscriber panicked"));
        (subscriber, publisher_result)
    });
    summarise_latency(count, subscriber, publisher_result)
}

fn summarise_latency(
    expected: u64,
    mut subscriber: SubscriberOutcome,
    publisher_result: Result<(), String>,
) -> LatencyOutcome {
    let mut failures: Vec<String> = publisher_result.err().into_iter().collect();
    failures.extend(subscriber.failure.take());
    if failures.is_empty() && subscriber.unique < expected {
        failures.push(format!(
            "received {} of {expected} messages",
            subscriber.unique
        ));
    }
    let samples = &mut subscriber.latencies_us;
    samples.sort_unstable();
    LatencyOutcome {
        p50_us: percentile(samples, 0.50),
        p99_us: percentile(samples, 0.99),
        samples: samples.len(),
        failure: (!failures.is_empty()).then(|| failures.join("; ")),
    }
}

/// Nearest-rank percentile of sorted samples; NaN when there are none.
pub fn percentile(sorted: &[u64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// One thread writes on schedule while a second reads the PUBACKs, so a
/// late acknowledgement never delays the next send.
fn run_paced_publisher(
    endpoint: &Endpoint,
    plan: &PublisherPlan,
    period: Duration,
    run: &Run,
) -> Result<(), String> {
    let result = (|| {
        let mut writer = Client::connect_to(endpoint, &plan.client_id, &client_options())?;
        if writer.is_tls() {
            let Some(opened_at) = run.gate.arrive_and_wait(Instant::now() + SETUP_TIMEOUT) else {
                return Ok(());
            };
            send_on_schedule_one_thread(&mut writer, plan, period, opened_at, run)?;
            writer.disconnect();
            return Ok(());
        }
        let mut reader = writer.reader_handle()?;
        let Some(opened_at) = run.gate.arrive_and_wait(Instant::now() + SETUP_TIMEOUT) else {
            return Ok(());
        };
        let acked = AtomicU64::new(0);
        thread::scope(|scope| {
            let ack_reader = scope.spawn(|| count_acks(&mut reader, plan.count, &acked, run));
            let sent = send_on_schedule(&mut writer, plan, period, opened_at, &acked, run);
            if sent.is_err() {
                run.gate.abort();
            }
            let acks = ack_reader
                .join()
                .unwrap_or_else(|_| Err("ack reader panicked".into()));
            sent.and(acks)
        })?;
        writer.disconnect();
        Ok(())
    })();
    result.map_err(|error: String| {
        run.gate.abort();
        format!("{}: {error}", plan.client_id)
    })
}

/// Sends message `i` at `opened_at + i * period`, or as soon after as the
/// ack window allows.
fn send_on_schedule(
    client: &mut Client,
    plan: &PublisherPlan,
    period: Duration,
    opened_at: Instant,
    acked: &AtomicU64,
    run: &Run,
) -> Result<(), String> {
    let mut publish = PublishPacket::new(&plan.topic, QoS::AtLeastOnce);
    let mut next_id: u16 = 1;
    for seq in 0..plan.count {
        run.check("publisher")?;
        let due = opened_at + period * seq as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        wait_for_ack_window(seq, acked, run)?;
        client.queue(publish.stamped(plan.first_seq + seq, Some(next_id)));
        next_id = next_id.checked_add(1).unwrap_or(1);
        client.flush()?;
    }
    Ok(())
}

/// As [`send_on_schedule`] with the PUBACKs read on the same thread,
/// between sends: a TLS session has one state, which two threads cannot
/// share without one waiting on the other's read. A message's latency runs
/// from the stamp taken as it is queued, so a send made a little after its
/// time costs the figure nothing.
fn send_on_schedule_one_thread(
    client: &mut Client,
    plan: &PublisherPlan,
    period: Duration,
    opened_at: Instant,
    run: &Run,
) -> Result<(), String> {
    let mut publish = PublishPacket::new(&plan.topic, QoS::AtLeastOnce);
    let mut next_id: u16 = 1;
    let mut acks = AckCount::new(plan.count);
    for seq in 0..plan.count {
        let due = opened_at + period * seq as u32;
        loop {
            run.check("publisher")?;
            let window_open = seq - acks.total < u64::from(QOS1_WINDOW_MESSAGES);
            let wait = due.saturating_duration_since(Instant::now());
            if window_open && wait.is_zero() {
                break;
            }
            client.set_read_wait(if window_open {
                wait.min(READ_POLL)
            } else {
                READ_POLL
            })?;
            acks.read(client)?;
        }
        client.queue(publish.stamped(plan.first_seq + seq, Some(next_id)));
        next_id = next_id.checked_add(1).unwrap_or(1);
        client.flush()?;
    }
    client.set_read_wait(READ_POLL)?;
    while acks.total < plan.count {
        run.check("publisher")?;
        acks.read(client)?;
    }
    Ok(())
}

/// PUBACKs counted as they are read, failing on a refusal or on none for
/// `STALL_TIMEOUT`.
struct AckCount {
    total: u64,
    expected: u64,
    last_ack_at: Instant,
}

impl AckCount {
    fn new(expected: u64) -> AckCount {
        AckCount {
            total: 0,
            expected,
            last_ack_at: Instant::now(),
        }
    }

    /// Reads once, waiting at most the client's read wait.
    fn read(&mut self, client: &mut Client) -> Result<(), String> {
        client.fill()?;
        let before = self.total;
        while let Some(packet) = client.next_packet()? {
            if let Packet::Puback(puback) = packet {
                if puback.reason_code.0 != 0 {
                    return Err(format!(
                        "PUBACK with reason code 0x{:02X}",
                        puback.reason_code.0
                    ));
                }
                self.total += 1;
            }
        }
        if self.total > before {
            self.last_ack_at = Instant::now();
        } else if self.total < self.expected && self.last_ack_at.elapsed() >= STALL_TIMEOUT {
            return Err(format!(
                "no PUBACK for {STALL_TIMEOUT:?}; {} of {}",
                self.total, self.expected
            ));
        }
        Ok(())
    }
}

fn wait_for_ack_window(sent: u64, acked: &AtomicU64, run: &Run) -> Result<(), String> {
    let waiting_since = Instant::now();
    while sent - acked.load(Ordering::SeqCst) >= u64::from(QOS1_WINDOW_MESSAGES) {
        run.check("publisher")?;
        if waiting_since.elapsed() >= STALL_TIMEOUT {
            return Err(format!(
                "no PUBACK for {STALL_TIMEOUT:?} with a full window"
            ));
        }
        thread::sleep(WINDOW_POLL);
    }
    Ok(())
}

fn count_acks(client: &mut Client, count: u64, acked: &AtomicU64, run: &Run) -> Result<(), String> {
    let mut acks = AckCount::new(count);
    while acks.total < count {
        run.check("ack reader")?;
        acks.read(client)?;
        acked.store(acks.total, Ordering::SeqCst);
    }
    Ok(())
}
