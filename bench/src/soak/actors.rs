//! The gateway mix: sensors, a job producer, queue workers, readers of the
//! log, the state and the dead letters, short-lived clients with random
//! ids, and the upstream peer's outages. Each actor is a thread with a
//! blocking client; every loop checks the run's flags at least every
//! `client::READ_POLL`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saguin::codec::{Packet, Properties, ProtocolVersion, Publish, QoS, ReasonCode};

use super::ledger::{payload, payload_id, Counts, IdSet, Ledger};
use super::profile::QUEUE_NAME;
use crate::brokers::{Broker, BrokerBinaries};
use crate::client::{Client, ClientOptions, Endpoint, SessionStart};

/// Longest a PUBACK may take before the connection is given up.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before a failed connection is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a durable reader's session outlives its connection.
pub const READER_SESSION_EXPIRY_S: u32 = 3600;
/// How long the sessions random clients leave behind outlive them.
const RANDOM_SESSION_EXPIRY_S: u32 = 30;
/// The gap between the producers' first connections.
const CONNECT_SPREAD: Duration = Duration::from_millis(25);
/// A reader's Receive Maximum.
const READER_WINDOW: u16 = 64;

/// How the mix is paced; `Mix::for_run` scales what depends on the length.
#[derive(Clone, Debug)]
pub struct Mix {
    pub sensors: usize,
    pub sensors_per_connection: usize,
    /// Each sensor publishes a reading (QoS 0 and 1 in turn), its state
    /// and an event this often.
    pub reading_every: Duration,
    pub state_every: Duration,
    pub event_every: Duration,
    pub job_every: Duration,
    pub workers: usize,
    /// The share of jobs a worker hands back with `return`.
    pub job_return_share: f64,
    /// The mean life of a connection that reconnects at random.
    pub connection_life: Duration,
    /// The away consumer is on for this long, then off for as long.
    pub away_cycle: Duration,
    /// The upstream peer is stopped this often, for `outage_length`.
    pub outage_every: Duration,
    pub outage_length: Duration,
    /// The mean gap between clients with random ids.
    pub random_client_every: Duration,
}

impl Mix {
    pub fn for_run(run: Duration) -> Mix {
        let clamp = |d: Duration, lo: u64, hi: u64| {
            d.clamp(Duration::from_secs(lo), Duration::from_secs(hi))
        };
        let outage_every = clamp(run / 6, 30, 600);
        Mix {
            sensors: 1000,
            sensors_per_connection: 5,
            reading_every: Duration::from_secs(5),
            state_every: Duration::from_secs(30),
            event_every: Duration::from_secs(20),
            job_every: Duration::from_millis(500),
            workers: 3,
            job_return_share: 0.1,
            connection_life: Duration::from_secs(300),
            away_cycle: clamp(run / 12, 10, 300),
            outage_every,
            outage_length: clamp(outage_every / 5, 5, 60),
            random_client_every: Duration::from_secs(2),
        }
    }

    pub fn sensor_connections(&self) -> usize {
        self.sensors.div_ceil(self.sensors_per_connection)
    }
}

/// The run's phases, as every actor sees them.
#[derive(Default)]
pub struct Flags {
    /// Producers stop publishing and leave.
    pub stop_producing: AtomicBool,
    /// Readers stay connected until they have everything; no more outages.
    pub draining: AtomicBool,
    /// Everyone leaves.
    pub stop_all: AtomicBool,
    /// Readers that have subscribed once: producers start when all have.
    pub readers_ready: AtomicUsize,
}

impl Flags {
    fn producing(&self) -> bool {
        !self.stop_producing.load(Ordering::Relaxed) && self.running()
    }

    fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    fn running(&self) -> bool {
        !self.stop_all.load(Ordering::Relaxed)
    }
}

/// Publish latencies (PUBACK round trips) since the sampler last took them.
#[derive(Default)]
pub struct Latencies {
    /// QoS 1 readings: broadcast, answered at once.
    pub broadcast_us: Mutex<Vec<u64>>,
    /// QoS 1 events into the `append` log: answered after the commit.
    pub append_us: Mutex<Vec<u64>>,
}

/// What every actor shares.
pub struct Shared {
    pub mix: Mix,
    pub broker: Endpoint,
    pub flags: Flags,
    pub ledger: Ledger,
    pub latencies: Latencies,
}

/// xorshift64*: enough randomness for a load mix, seeded per actor.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng((seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, share: f64) -> bool {
        self.unit() < share
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Exponentially distributed with this mean: the gaps of random events.
    fn exponential(&mut self, mean: Duration) -> Duration {
        mean.mul_f64(-(1.0 - self.unit()).ln())
    }

    /// Uniform in [0, span).
    fn within(&mut self, span: Duration) -> Duration {
        span.mul_f64(self.unit())
    }
}

/// Sleeps `duration`, or less once `keep_waiting` turns false.
fn pause(duration: Duration, keep_waiting: impl Fn() -> bool) {
    let until = Instant::now() + duration;
    while keep_waiting() {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(100)));
    }
}

fn options(version: ProtocolVersion, receive_maximum: Option<u16>) -> ClientOptions {
    ClientOptions {
        version,
        // No keep-alive: a reader may wait longer than any interval for its
        // next record, and the bench's client sends no PINGREQ.
        keep_alive_s: 0,
        receive_maximum,
    }
}

/// Ends a connection the way devices do: a clean DISCONNECT or, half the
/// time, the socket just closing.
fn leave(client: Client, rng: &mut Rng) {
    if rng.chance(0.5) {
        client.disconnect();
    } else {
        drop(client);
    }
}

/// Packet ids 1..=65535 in turn.
struct PacketIds(u16);

impl PacketIds {
    fn next(&mut self) -> u16 {
        self.0 = self.0 % u16::MAX + 1;
        self.0
    }
}

fn publish(topic: String, qos: QoS, packet_id: Option<u16>, body: Vec<u8>) -> Packet {
    Packet::Publish(Publish {
        qos,
        topic,
        packet_id,
        payload: body,
        ..Publish::default()
    })
}

/// Publishes at QoS 1 and waits for its PUBACK, acknowledging whatever
/// the connection is delivered meanwhile; the PUBACK's code and the round
/// trip.
fn publish_acked(
    client: &mut Client,
    ids: &mut PacketIds,
    topic: String,
    body: Vec<u8>,
) -> Result<(ReasonCode, Duration), String> {
    let id = ids.next();
    let sent = Instant::now();
    client.queue(&publish(topic, QoS::AtLeastOnce, Some(id), body));
    client.flush()?;
    let deadline = sent + ACK_TIMEOUT;
    loop {
        while let Some(packet) = client.next_packet()? {
            match packet {
                Packet::Puback(ack) if ack.packet_id == id => {
                    return Ok((ack.reason_code, sent.elapsed()))
                }
                Packet::Publish(delivery) => {
                    if let Some(delivered) = delivery.packet_id {
                        client.queue_puback(delivered);
                    }
                }
                Packet::Disconnect(d) => {
                    return Err(format!("disconnected with {:?}", d.reason_code))
                }
                _ => {}
            }
        }
        client.flush()?;
        if Instant::now() > deadline {
            return Err(format!("no PUBACK within {ACK_TIMEOUT:?}"));
        }
        client.fill()?;
    }
}

/// Connects until it works or `keep_trying` turns false; counts each
/// failure as the broker's.
fn connect_retrying(
    shared: &Shared,
    endpoint: &Endpoint,
    client_id: &str,
    options: &ClientOptions,
    start: SessionStart,
    keep_trying: impl Fn() -> bool,
    count_failures: bool,
) -> Option<(Client, bool)> {
    while keep_trying() {
        match Client::connect_session(endpoint, client_id, options, start) {
            Ok(connected) => return Some(connected),
            Err(error) => {
                if count_failures {
                    shared.ledger.counts.broker_error(&error);
                }
                pause(RETRY_AFTER, &keep_trying);
            }
        }
    }
    None
}

/// What a producing connection publishes.
#[derive(Clone, Copy, Debug)]
enum Duty {
    /// A sensor's reading, QoS 0 and 1 in turn.
    Reading,
    /// A sensor's state into the `latest` channel.
    State,
    /// A sensor's event into the `append` log.
    Event,
    /// A job into the queue.
    Job,
}

struct Task {
    due: Instant,
    every: Duration,
    duty: Duty,
    sensor: usize,
}

/// One producing connection: `sensors` sensors, or (with none) the job
/// producer. Reconnects with the same client id at random, every fourth
/// one speaking MQTT 3.1.1.
pub fn producer(shared: Arc<Shared>, index: usize, sensors: Vec<usize>, seed: u64) {
    let mix = &shared.mix;
    // Spread the first connections out: the profile admits 50 a second.
    pause(CONNECT_SPREAD * index as u32, || shared.flags.producing());
    let mut rng = Rng::new(seed, index as u64);
    let now = Instant::now();
    let mut tasks = Vec::new();
    for &sensor in &sensors {
        for (duty, every) in [
            (Duty::Reading, mix.reading_every),
            (Duty::State, mix.state_every),
            (Duty::Event, mix.event_every),
        ] {
            let due = now + rng.within(every);
            tasks.push(Task {
                due,
                every,
                duty,
                sensor,
            });
        }
    }
    let client_id = if sensors.is_empty() {
        tasks.push(Task {
            due: now,
            every: mix.job_every,
            duty: Duty::Job,
            sensor: 0,
        });
        "soak-jobs".to_string()
    } else {
        format!("soak-sensor-{index:03}")
    };
    let version = if index % 4 == 3 {
        ProtocolVersion::V311
    } else {
        ProtocolVersion::V5
    };
    let mut state_sequence = vec![0u64; mix.sensors];
    let mut qos1_next = vec![false; mix.sensors];
    let producing = || shared.flags.producing();
    while let Some((mut client, _)) = connect_retrying(
        &shared,
        &shared.broker,
        &client_id,
        &options(version, None),
        SessionStart::Clean,
        producing,
        true,
    ) {
        let leave_at = Instant::now() + rng.exponential(mix.connection_life);
        let mut ids = PacketIds(0);
        let outcome = loop {
            if !producing() {
                break Ok(());
            }
            let now = Instant::now();
            if now >= leave_at {
                break Ok(());
            }
            let next = tasks
                .iter_mut()
                .min_by_key(|t| t.due)
                .expect("a producer has a task");
            if next.due > now {
                std::thread::sleep((next.due - now).min(Duration::from_millis(100)));
                continue;
            }
            next.due += next.every;
            let (duty, sensor) = (next.duty, next.sensor);
            let ledger = &shared.ledger;
            Counts::add(&ledger.counts.publishes);
            let result = match duty {
                Duty::Reading => {
                    qos1_next[sensor] = !qos1_next[sensor];
                    let topic = format!("sensors/s{sensor:04}/reading");
                    let body = payload(rng.next_u64() >> 1);
                    if qos1_next[sensor] {
                        publish_acked(&mut client, &mut ids, topic, body).map(|(code, rtt)| {
                            record(&shared.latencies.broadcast_us, rtt);
                            code
                        })
                    } else {
                        client.queue(&publish(topic, QoS::AtMostOnce, None, body));
                        client.flush().map(|_| ReasonCode::SUCCESS)
                    }
                }
                Duty::State => {
                    state_sequence[sensor] += 1;
                    let sequence = state_sequence[sensor];
                    let topic = format!("state/s{sensor:04}");
                    publish_acked(&mut client, &mut ids, topic, payload(sequence)).map(
                        |(code, _)| {
                            if code == ReasonCode::SUCCESS {
                                ledger.state_acked(sensor, sequence);
                            }
                            code
                        },
                    )
                }
                Duty::Event => {
                    let id = ledger.next_event_id();
                    let topic = format!("log/s{sensor:04}/event");
                    publish_acked(&mut client, &mut ids, topic, payload(id)).map(|(code, rtt)| {
                        record(&shared.latencies.append_us, rtt);
                        if code == ReasonCode::SUCCESS {
                            ledger.events_acked.insert(id);
                        }
                        code
                    })
                }
                Duty::Job => {
                    let id = ledger.next_job_id();
                    publish_acked(&mut client, &mut ids, "work/job".into(), payload(id)).map(
                        |(code, _)| {
                            if code == ReasonCode::SUCCESS {
                                ledger.jobs_acked.insert(id);
                            }
                            code
                        },
                    )
                }
            };
            match result {
                Ok(ReasonCode::SUCCESS) => {}
                Ok(_) => Counts::add(&ledger.counts.refusals),
                Err(error) => break Err(error),
            }
        };
        end_session(&shared, client, &client_id, outcome, &mut rng, producing);
    }
}

/// After a connection's session: leaves as a device would and counts the
/// reconnect when it was planned, or counts the broker's error and waits
/// before the next try.
fn end_session(
    shared: &Shared,
    client: Client,
    client_id: &str,
    outcome: Result<(), String>,
    rng: &mut Rng,
    carrying_on: impl Fn() -> bool,
) {
    match outcome {
        Ok(()) => {
            leave(client, rng);
            if carrying_on() {
                Counts::add(&shared.ledger.counts.reconnects);
            }
        }
        Err(error) => {
            shared
                .ledger
                .counts
                .broker_error(&format!("{client_id}: {error}"));
            pause(RETRY_AFTER, carrying_on);
        }
    }
}

fn record(latencies: &Mutex<Vec<u64>>, rtt: Duration) {
    latencies
        .lock()
        .expect("latencies")
        .push(rtt.as_micros() as u64);
}

/// When a reader is connected.
#[derive(Clone, Copy, Debug)]
pub enum Presence {
    /// Connected, reconnecting at random.
    Mostly,
    /// On for the mix's `away_cycle`, then off for as long, until the run
    /// drains.
    HalfTheTime,
    /// Connected for the whole run.
    Always,
}

/// What a reader is and what it keeps.
pub struct Reader {
    pub client_id: String,
    pub endpoint: Endpoint,
    pub filter: String,
    pub start: SessionStart,
    pub presence: Presence,
    /// Where the ids of what it is delivered go, if anywhere.
    pub delivered: Option<fn(&Ledger) -> &IdSet>,
    /// Whether a connection that fails is the broker's fault (not so for
    /// the upstream peer, which the mix stops on purpose).
    pub count_failures: bool,
}

/// A subscriber at QoS 1 that records the id of every delivery and
/// acknowledges it, subscribing again only when its session is gone.
pub fn reader(shared: Arc<Shared>, reader: Reader, seed: u64, stream: u64) {
    let mut rng = Rng::new(seed, stream);
    let delivered = reader.delivered.map(|set| set(&shared.ledger));
    let running = || shared.flags.running();
    let failed = |error: &str| {
        if reader.count_failures {
            let error = format!("{}: {error}", reader.client_id);
            shared.ledger.counts.broker_error(&error);
        }
        pause(RETRY_AFTER, running);
    };
    let mut subscribed_once = false;
    while let Some((mut client, present)) = connect_retrying(
        &shared,
        &reader.endpoint,
        &reader.client_id,
        &options(ProtocolVersion::V5, Some(READER_WINDOW)),
        reader.start,
        running,
        reader.count_failures,
    ) {
        if !present {
            if subscribed_once && reader.start != SessionStart::Clean {
                Counts::add(&shared.ledger.counts.sessions_lost);
            }
            if let Err(error) = client.subscribe(&reader.filter, QoS::AtLeastOnce) {
                failed(&error);
                continue;
            }
            if !subscribed_once {
                shared.flags.readers_ready.fetch_add(1, Ordering::Relaxed);
            }
            subscribed_once = true;
        }
        let online = match reader.presence {
            Presence::Mostly => rng.exponential(shared.mix.connection_life),
            Presence::HalfTheTime => shared.mix.away_cycle,
            Presence::Always => Duration::MAX,
        };
        let leave_at = Instant::now().checked_add(online);
        let stays = |now: Instant| shared.flags.draining() || leave_at.is_none_or(|at| now < at);
        let outcome = (|| -> Result<(), String> {
            while running() && stays(Instant::now()) {
                while let Some(packet) = client.next_packet()? {
                    if let Packet::Publish(delivery) = packet {
                        if let (Some(set), Some(id)) = (delivered, payload_id(&delivery.payload)) {
                            set.insert(id);
                        }
                        if let Some(id) = delivery.packet_id {
                            client.queue_puback(id);
                        }
                    }
                }
                client.flush()?;
                client.fill()?;
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                client.disconnect();
                if running() {
                    Counts::add(&shared.ledger.counts.reconnects);
                }
                if matches!(reader.presence, Presence::HalfTheTime) && !shared.flags.draining() {
                    pause(shared.mix.away_cycle, || {
                        running() && !shared.flags.draining()
                    });
                }
            }
            Err(error) => failed(&error),
        }
    }
}

/// A queue worker: answers `ack`, or now and then `return`, to every job
/// it is offered, and reconnects at random.
pub fn worker(shared: Arc<Shared>, index: usize, seed: u64) {
    let mut rng = Rng::new(seed, 10_000 + index as u64);
    let client_id = format!("soak-worker-{index}");
    let running = || shared.flags.running();
    let response = format!("$saguin/queue/{QUEUE_NAME}/response");
    while let Some((mut client, _)) = connect_retrying(
        &shared,
        &shared.broker,
        &client_id,
        &options(ProtocolVersion::V5, None),
        SessionStart::Clean,
        running,
        true,
    ) {
        let leave_at = Instant::now() + rng.exponential(shared.mix.connection_life);
        let mut ids = PacketIds(0);
        // The job each answer in flight acknowledges, oldest first: PUBACKs
        // come back in order.
        let mut answers: std::collections::VecDeque<(u16, Option<u64>)> = Default::default();
        let outcome = (|| -> Result<(), String> {
            client.subscribe(&format!("$saguin/queue/{QUEUE_NAME}"), QoS::AtLeastOnce)?;
            while running() && Instant::now() < leave_at {
                while let Some(packet) = client.next_packet()? {
                    match packet {
                        Packet::Publish(job) => {
                            let job_id = payload_id(&job.payload).ok_or("a job not ours")?;
                            let hand_back = rng.chance(shared.mix.job_return_share);
                            let id = ids.next();
                            client.queue(&Packet::Publish(Publish {
                                qos: QoS::AtLeastOnce,
                                topic: response.clone(),
                                packet_id: Some(id),
                                payload: if hand_back {
                                    b"return".to_vec()
                                } else {
                                    b"ack".to_vec()
                                },
                                properties: Properties {
                                    correlation_data: job.properties.correlation_data.clone(),
                                    ..Properties::default()
                                },
                                ..Publish::default()
                            }));
                            client.queue_puback(job.packet_id.ok_or("a job at QoS 0")?);
                            answers.push_back((id, (!hand_back).then_some(job_id)));
                            if hand_back {
                                Counts::add(&shared.ledger.counts.jobs_returned);
                            }
                        }
                        Packet::Puback(ack) => {
                            let (id, job) = answers.pop_front().ok_or("an unasked PUBACK")?;
                            if id != ack.packet_id {
                                return Err(format!("PUBACK {} for answer {id}", ack.packet_id));
                            }
                            if let (Some(job), true) = (job, ack.reason_code == ReasonCode::SUCCESS)
                            {
                                shared.ledger.jobs_done.insert(job);
                            }
                        }
                        other => return Err(format!("a worker was sent {other:?}")),
                    }
                }
                client.flush()?;
                client.fill()?;
            }
            Ok(())
        })();
        end_session(&shared, client, &client_id, outcome, &mut rng, running);
    }
}

/// Clients that come once under a random id, one at a time: a third ask
/// for a session that outlives them by `RANDOM_SESSION_EXPIRY_S` and
/// subscribe to a sensor; each publishes a reading, stays a few seconds
/// and leaves.
pub fn random_clients(shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed, 20_000);
    let producing = || shared.flags.producing();
    loop {
        pause(rng.exponential(shared.mix.random_client_every), producing);
        if !producing() {
            return;
        }
        let client_id = format!("soak-r-{:016x}", rng.next_u64());
        let keeps_session = rng.chance(1.0 / 3.0);
        let start = if keeps_session {
            SessionStart::Resume {
                expiry_s: RANDOM_SESSION_EXPIRY_S,
            }
        } else {
            SessionStart::Clean
        };
        let sensor = rng.below(shared.mix.sensors);
        let visit = (|| -> Result<(), String> {
            let (mut client, _) = Client::connect_session(
                &shared.broker,
                &client_id,
                &options(ProtocolVersion::V5, None),
                start,
            )?;
            if keeps_session {
                client.subscribe(&format!("sensors/s{sensor:04}/#"), QoS::AtLeastOnce)?;
            }
            let mut ids = PacketIds(0);
            let topic = format!("sensors/s{sensor:04}/reading");
            publish_acked(&mut client, &mut ids, topic, payload(rng.next_u64() >> 1))?;
            let stay_until = Instant::now() + rng.within(Duration::from_secs(5));
            while Instant::now() < stay_until && producing() {
                while let Some(packet) = client.next_packet()? {
                    if let Packet::Publish(Publish {
                        packet_id: Some(id),
                        ..
                    }) = packet
                    {
                        client.queue_puback(id);
                    }
                }
                client.flush()?;
                client.fill()?;
            }
            leave(client, &mut rng);
            Ok(())
        })();
        match visit {
            Ok(()) => Counts::add(&shared.ledger.counts.reconnects),
            Err(error) => shared
                .ledger
                .counts
                .broker_error(&format!("{client_id}: {error}")),
        }
    }
}

/// Stops the upstream peer every `outage_every` for `outage_length` and
/// starts it again, until the run drains; hands the peer back, running.
pub fn outages(
    shared: Arc<Shared>,
    mut peer: Broker,
    binaries: BrokerBinaries,
) -> Result<Broker, String> {
    let mix = &shared.mix;
    let calm = || shared.flags.running() && !shared.flags.draining();
    loop {
        pause(mix.outage_every, calm);
        if !calm() {
            return Ok(peer);
        }
        peer.restart(&binaries, mix.outage_length)?;
        Counts::add(&shared.ledger.counts.outages);
    }
}
