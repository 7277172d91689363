//! Deterministic tests of queue channels: simulated clients, simulated
//! time, and a memory provider that answers every storage request as soon
//! as the broker call that made it returns.

use std::collections::VecDeque;

use crate::codec::{Connect, PubAck, Publish, QoS, Subscribe, SubscriptionOptions};
use crate::core::channel::queue::rules::{Backoff, DeliveryId};
use crate::core::channel::queue::{attempts_key, HeldJob, QueueSettings};
use crate::core::channel::{ChannelSettings, ChannelStart};
use crate::core::*;
use crate::store::{self, Answer, Completion, MemoryProvider, Provider, Ticket, Write};

struct Shell {
    sent: Vec<(Key, Packet)>,
    closed: Vec<Key>,
    provider: MemoryProvider,
    answers: VecDeque<Completion>,
    /// A storage thread too busy to take a commit.
    busy: bool,
    /// Commits taken but neither written nor answered yet, while `slow`.
    unanswered: Vec<(u64, Vec<Write>)>,
    slow: bool,
    /// Dead-letter moves asked for.
    moves_tried: u32,
}

impl Transport for Shell {
    fn send(&mut self, conn: Key, _: ProtocolVersion, packet: &Packet, _: bool) -> bool {
        self.sent.push((conn, packet.clone()));
        true
    }

    fn close(&mut self, conn: Key) {
        self.closed.push(conn);
    }

    fn store(&mut self, _provider: usize, request: StoreRequest) -> bool {
        if self.busy && matches!(request, StoreRequest::Commit { .. }) {
            return false;
        }
        if let StoreRequest::Commit { writes, .. } = &request {
            let moves = writes.iter().filter(|w| matches!(w, Write::Move { .. }));
            self.moves_tried += moves.count() as u32;
        }
        let request = match request {
            StoreRequest::Commit { ticket, writes } if self.slow => {
                self.unanswered.push((ticket, writes));
                return true;
            }
            other => other,
        };
        let (ticket, answer) = match request {
            StoreRequest::Commit { ticket, writes } => {
                (ticket, Answer::Committed(self.provider.commit(&writes)))
            }
            StoreRequest::Read {
                ticket,
                channel,
                from_offset,
                limit,
            } => (
                ticket,
                Answer::Read(self.provider.read(&channel, from_offset, limit)),
            ),
            StoreRequest::Position {
                ticket,
                channel,
                reader,
            } => (
                ticket,
                Answer::Position(self.provider.position(&channel, &reader)),
            ),
            StoreRequest::FirstAtOrAfter {
                ticket,
                channel,
                at_unix_ms,
            } => (
                ticket,
                Answer::Offset(self.provider.first_at_or_after(&channel, at_unix_ms)),
            ),
        };
        self.answers.push_back(Completion {
            ticket: Ticket(ticket),
            answer,
        });
        true
    }
}

struct Rig {
    broker: Broker,
    shell: Shell,
    now_ms: u64,
}

const QUEUE: &str = "jobs";
const FORM: &str = "$saguin/queue/jobs";
const RESPONSE: &str = "$saguin/queue/jobs/response";

fn queue_settings(max_attempts: u32, backoff: Backoff, base_ms: u64) -> QueueSettings {
    QueueSettings {
        visibility_timeout_ms: 30_000,
        job_expires_after_ms: None,
        max_attempts,
        backoff,
        backoff_base_ms: base_ms,
        held: Vec::new(),
    }
}

fn channels(queue: QueueSettings, max_bytes: Option<u64>) -> Vec<ChannelSettings> {
    let plain = |name: &str, filter: &str| ChannelSettings {
        name: name.into(),
        filters: vec![filter.into()],
        provider: 0,
        start: ChannelStart::Floor,
        max_bytes: None,
        retention_period_s: None,
        retention_bytes: None,
        next: 1,
        floor: 1,
        written_filter: filter.into(),
        latest: None,
        queue: None,
    };
    vec![
        ChannelSettings {
            max_bytes,
            queue: Some(queue),
            ..plain(QUEUE, "jobs/#")
        },
        plain("jobs__dlq", "jobs/__dlq/#"),
    ]
}

impl Rig {
    fn new(queue: QueueSettings) -> Rig {
        Rig::with(
            channels(queue, None),
            MemoryProvider::open("m", 64 << 20, 2 << 20, None).unwrap(),
        )
    }

    fn with(channels: Vec<ChannelSettings>, provider: MemoryProvider) -> Rig {
        let settings = Settings {
            channels,
            start_unix_ms: 1_700_000_000_000,
            ..Settings::default()
        };
        Rig {
            broker: Broker::new(settings),
            shell: Shell {
                sent: Vec::new(),
                closed: Vec::new(),
                provider,
                answers: VecDeque::new(),
                busy: false,
                unanswered: Vec::new(),
                slow: false,
                moves_tried: 0,
            },
            now_ms: 1_000,
        }
    }

    /// Hands back every storage answer, and those their handling asks for.
    fn settle(&mut self) {
        while let Some(completion) = self.shell.answers.pop_front() {
            self.broker
                .handle_store_completion(completion, self.now_ms, &mut self.shell);
        }
    }

    fn packet(&mut self, conn: Key, packet: Packet) {
        self.broker
            .handle_packet(conn, packet, self.now_ms, &mut self.shell);
        self.settle();
    }

    fn connect_as(&mut self, client_id: &str, version: ProtocolVersion, receive_max: u16) -> Key {
        let conn = self
            .broker
            .accept(self.now_ms, crate::core::Origin::default())
            .unwrap();
        let mut properties = Properties::default();
        if receive_max != u16::MAX {
            properties.receive_maximum = Some(receive_max);
        }
        let connect = Connect {
            protocol_version: version,
            clean_start: true,
            keep_alive_s: 0,
            client_id: client_id.into(),
            will: None,
            username: None,
            password: None,
            properties,
        };
        self.packet(conn, Packet::Connect(Box::new(connect)));
        assert!(
            matches!(self.take(conn).first(), Some(Packet::Connack(c)) if c.reason_code == ReasonCode::SUCCESS)
        );
        conn
    }

    fn connect(&mut self, client_id: &str) -> Key {
        self.connect_as(client_id, ProtocolVersion::V5, u16::MAX)
    }

    fn subscribe_with(
        &mut self,
        conn: Key,
        filter: &str,
        options: SubscriptionOptions,
    ) -> ReasonCode {
        let subscribe = Subscribe {
            packet_id: 9,
            properties: Properties::default(),
            filters: vec![(filter.into(), options)],
        };
        self.broker.handle_packet(
            conn,
            Packet::Subscribe(subscribe),
            self.now_ms,
            &mut self.shell,
        );
        let code = self
            .shell
            .sent
            .iter()
            .find_map(|(c, p)| match p {
                Packet::Suback(s) if *c == conn => Some(s.reason_codes[0]),
                _ => None,
            })
            .expect("a SUBACK");
        self.shell
            .sent
            .retain(|(c, p)| !(*c == conn && matches!(p, Packet::Suback(_))));
        self.settle();
        code
    }

    fn work(&mut self, conn: Key) -> ReasonCode {
        let options = SubscriptionOptions {
            qos: QoS::AtLeastOnce,
            ..SubscriptionOptions::default()
        };
        self.subscribe_with(conn, FORM, options)
    }

    fn publish(&mut self, conn: Key, topic: &str, payload: &[u8]) -> ReasonCode {
        let publish = Publish {
            qos: QoS::AtLeastOnce,
            topic: topic.into(),
            packet_id: Some(1),
            payload: payload.to_vec(),
            ..Publish::default()
        };
        self.packet(conn, Packet::Publish(publish));
        let code = self.shell.sent.iter().find_map(|(c, p)| match p {
            Packet::Puback(a) if *c == conn => Some(a.reason_code),
            _ => None,
        });
        self.shell
            .sent
            .retain(|(c, p)| !(*c == conn && matches!(p, Packet::Puback(_))));
        code.expect("a PUBACK")
    }

    fn take(&mut self, conn: Key) -> Vec<Packet> {
        let (mine, rest): (Vec<_>, Vec<_>) =
            self.shell.sent.drain(..).partition(|(k, _)| *k == conn);
        self.shell.sent = rest;
        mine.into_iter().map(|(_, p)| p).collect()
    }

    /// The jobs delivered to `conn` since last asked.
    fn jobs(&mut self, conn: Key) -> Vec<Publish> {
        let (jobs, rest): (Vec<_>, Vec<_>) = self
            .shell
            .sent
            .drain(..)
            .partition(|(k, p)| *k == conn && matches!(p, Packet::Publish(_)));
        self.shell.sent = rest;
        jobs.into_iter()
            .map(|(_, p)| match p {
                Packet::Publish(p) => p,
                _ => unreachable!(),
            })
            .collect()
    }

    fn puback(&mut self, conn: Key, job: &Publish) {
        let ack = PubAck {
            packet_id: job.packet_id.expect("QoS 1"),
            ..PubAck::default()
        };
        self.packet(conn, Packet::Puback(ack));
    }

    fn answer_with(&mut self, conn: Key, correlation: Vec<u8>, outcome: &str) {
        let mut publish = Publish {
            qos: QoS::AtLeastOnce,
            topic: RESPONSE.into(),
            packet_id: Some(2),
            payload: outcome.as_bytes().to_vec(),
            ..Publish::default()
        };
        publish.properties.correlation_data = Some(correlation);
        self.packet(conn, Packet::Publish(publish));
        self.shell
            .sent
            .retain(|(c, p)| !(*c == conn && matches!(p, Packet::Puback(_))));
    }

    fn answer(&mut self, conn: Key, job: &Publish, outcome: &str) {
        let correlation = job
            .properties
            .correlation_data
            .clone()
            .expect("a Delivery ID");
        self.answer_with(conn, correlation, outcome);
    }

    fn advance_to(&mut self, at_ms: u64) {
        while self.now_ms < at_ms {
            self.now_ms = (self.now_ms + 100).min(at_ms);
            self.broker.tick(self.now_ms, &mut self.shell);
            self.settle();
        }
    }

    /// Writes and answers the commits held while `slow`, in order.
    fn answer_slow_commits(&mut self) {
        for (ticket, writes) in std::mem::take(&mut self.shell.unanswered) {
            let answer = Answer::Committed(self.shell.provider.commit(&writes));
            self.shell.answers.push_back(Completion {
                ticket: Ticket(ticket),
                answer,
            });
        }
        self.settle();
    }

    /// A crash: the broker and every commit not yet written are lost, and
    /// a new broker starts from what the provider holds, as at startup.
    fn crash_and_restart(self, settings: QueueSettings) -> Rig {
        let provider = self.shell.provider;
        let mut held: Vec<HeldJob> = Vec::new();
        let state = Provider::channel(&provider, QUEUE);
        let limit = store::ReadLimit {
            max_records: 1_000,
            max_bytes: u64::MAX,
        };
        if let store::Read::Records(batch) = provider.read(QUEUE, state.floor, limit).unwrap() {
            held.extend(batch.records.iter().map(|r| HeldJob {
                offset: r.offset,
                received_at_unix_ms: r.message.received_at_ms,
                attempts: 0,
            }));
        }
        for (key, value) in provider.entries(QUEUE).unwrap() {
            if let Some((offset, attempts)) =
                crate::core::channel::queue::parse_attempts(&key, &value)
            {
                if let Some(job) = held.iter_mut().find(|h| h.offset == offset) {
                    job.attempts = attempts;
                }
            }
        }
        let mut chans = channels(QueueSettings { held, ..settings }, None);
        chans[0].next = state.next;
        chans[0].floor = state.floor;
        let dlq = Provider::channel(&provider, "jobs__dlq");
        chans[1].next = dlq.next;
        chans[1].floor = dlq.floor;
        // The provider outlives the broker, as a store on disk would.
        Rig::with(chans, provider)
    }

    fn held_in_store(&self, channel: &str) -> Vec<store::Record> {
        let limit = store::ReadLimit {
            max_records: 1_000,
            max_bytes: u64::MAX,
        };
        let floor = self.shell.provider.channel(channel).floor;
        match self.shell.provider.read(channel, floor, limit).unwrap() {
            store::Read::Records(batch) => batch.records,
            other => panic!("{other:?}"),
        }
    }
}

fn label<'a>(job: &'a Publish, name: &str) -> Option<&'a str> {
    job.properties
        .user_properties
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn attempt(job: &Publish) -> u32 {
    label(job, "saguin-attempt").unwrap().parse().unwrap()
}

fn one_job(rig: &mut Rig, conn: Key) -> Publish {
    let mut jobs = rig.jobs(conn);
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    jobs.remove(0)
}

#[test]
fn a_job_carries_the_publishers_message_and_the_queues_labels() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    assert_eq!(rig.work(worker), ReasonCode::GRANTED_QOS_1);
    let mut publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: "jobs/resize/42".into(),
        packet_id: Some(1),
        payload: b"img".to_vec(),
        ..Publish::default()
    };
    publish.properties.content_type = Some("image/png".into());
    publish.properties.message_expiry_interval_s = Some(3_600);
    publish.properties.user_properties = vec![("tenant".into(), "a".into())];
    rig.packet(producer, Packet::Publish(publish));
    let job = one_job(&mut rig, worker);
    assert_eq!(job.topic, "jobs/resize/42");
    assert_eq!(job.payload, b"img");
    assert_eq!(job.qos, QoS::AtLeastOnce);
    assert_eq!(job.properties.content_type.as_deref(), Some("image/png"));
    assert_eq!(job.properties.response_topic.as_deref(), Some(RESPONSE));
    let id = job.properties.correlation_data.as_deref().unwrap();
    assert!(id.len() <= 32);
    let names: Vec<&str> = job
        .properties
        .user_properties
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "tenant",
            "saguin-id",
            "saguin-offset",
            "saguin-timestamp",
            "saguin-expires",
            "saguin-attempt"
        ]
    );
    assert_eq!(label(&job, "saguin-offset"), Some("1"));
    assert_eq!(attempt(&job), 1);
    // Ack resolves: the record leaves the provider.
    rig.puback(worker, &job);
    rig.answer(worker, &job, "ack");
    assert!(rig.held_in_store(QUEUE).is_empty());
    assert_eq!(rig.broker.queues.job_count(0), Some(0));
}

#[test]
fn one_job_per_worker_whatever_its_window_and_offers_take_turns() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let w1 = rig.connect("w1");
    let w2 = rig.connect("w2");
    rig.work(w1);
    rig.work(w2);
    for i in 0..4 {
        rig.publish(producer, &format!("jobs/{i}"), b"x");
    }
    let j1 = one_job(&mut rig, w1);
    let j2 = one_job(&mut rig, w2);
    assert_ne!(label(&j1, "saguin-offset"), label(&j2, "saguin-offset"));
    rig.advance_to(5_000);
    assert!(rig.jobs(w1).is_empty() && rig.jobs(w2).is_empty());
    // An answer offers that worker its next job at once.
    rig.puback(w1, &j1);
    rig.answer(w1, &j1, "ack");
    let j3 = one_job(&mut rig, w1);
    assert_eq!(label(&j3, "saguin-offset"), Some("3"));
}

#[test]
fn the_visibility_clock_starts_at_the_puback_and_never_before() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    let other = rig.connect("other");
    rig.work(worker);
    rig.publish(producer, "jobs/a", b"x");
    rig.work(other);
    let job = one_job(&mut rig, worker);
    // DELIVERING has no deadline: an hour without a PUBACK takes nothing.
    rig.advance_to(rig.now_ms + 3_600_000);
    assert!(rig.jobs(other).is_empty());
    let acked_at = rig.now_ms;
    rig.puback(worker, &job);
    rig.advance_to(acked_at + 29_900);
    assert!(rig.jobs(other).is_empty(), "taken back before the timeout");
    rig.advance_to(acked_at + 30_200);
    let again = one_job(&mut rig, other);
    assert_eq!(attempt(&again), 2);
    // The first worker's Delivery ID is dead: its late ack resolves nothing.
    rig.answer(worker, &job, "ack");
    assert_eq!(rig.held_in_store(QUEUE).len(), 1);
    // And the current holder's answer is the one that counts.
    rig.puback(other, &again);
    rig.answer(other, &again, "ack");
    assert!(rig.held_in_store(QUEUE).is_empty());
}

#[test]
fn a_disconnect_returns_the_job_with_its_attempt_spent_only_after_a_puback() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let w1 = rig.connect("w1");
    rig.work(w1);
    rig.publish(producer, "jobs/a", b"x");
    let _never_acked = one_job(&mut rig, w1);
    rig.broker
        .handle_connection_lost(w1, rig.now_ms, &mut rig.shell);
    let w2 = rig.connect("w2");
    rig.work(w2);
    let job = one_job(&mut rig, w2);
    assert_eq!(attempt(&job), 1, "never shown to arrive: attempt unspent");
    rig.puback(w2, &job);
    rig.broker
        .handle_connection_lost(w2, rig.now_ms, &mut rig.shell);
    let w3 = rig.connect("w3");
    rig.work(w3);
    let job = one_job(&mut rig, w3);
    assert_eq!(attempt(&job), 2);
}

#[test]
fn only_the_holding_session_resolves_and_other_payloads_are_ignored() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    let stranger = rig.connect("stranger");
    rig.work(worker);
    rig.publish(producer, "jobs/a", b"x");
    let job = one_job(&mut rig, worker);
    rig.puback(worker, &job);
    rig.answer(stranger, &job, "ack");
    rig.answer(worker, &job, "done");
    rig.answer_with(worker, b"not an id".to_vec(), "ack");
    let forged = DeliveryId {
        run: 1,
        delivery: 1,
        offset: 1,
    };
    rig.answer_with(worker, forged.encode(), "ack");
    assert_eq!(rig.held_in_store(QUEUE).len(), 1);
    rig.answer(worker, &job, "ack");
    assert!(rig.held_in_store(QUEUE).is_empty());
}

/// Returns the job each time it arrives, and says when each attempt came.
fn attempt_times(rig: &mut Rig, worker: Key, attempts: u32) -> Vec<u64> {
    let mut times = Vec::new();
    let deadline = rig.now_ms + 600_000;
    while times.len() < attempts as usize && rig.now_ms < deadline {
        if let Some(job) = rig.jobs(worker).pop() {
            times.push(rig.now_ms);
            // Answered from inside the handler, before the PUBACK, as Paho does.
            rig.answer(worker, &job, "return");
            rig.puback(worker, &job);
        }
        rig.advance_to(rig.now_ms + 100);
    }
    times
}

#[test]
fn returned_jobs_wait_out_the_backoff_rounded_up_to_the_tick() {
    // The table in RFC 0005: the gap after n attempts.
    for (backoff, gaps) in [
        (Backoff::None, [0u64, 0, 0]),
        (Backoff::Linear, [2_000, 4_000, 6_000]),
        (Backoff::Exponential, [2_000, 4_000, 8_000]),
    ] {
        let mut rig = Rig::new(queue_settings(4, backoff, 2_000));
        let producer = rig.connect("producer");
        let worker = rig.connect("worker");
        rig.work(worker);
        rig.publish(producer, "jobs/a", b"x");
        let times = attempt_times(&mut rig, worker, 4);
        assert_eq!(times.len(), 4, "{backoff:?}");
        for (i, gap) in gaps.iter().enumerate() {
            let waited = times[i + 1] - times[i];
            // Honoured to within one 200 ms tick, and never early.
            assert!(
                waited >= *gap && waited <= gap + 300,
                "{backoff:?}: attempt {} came {waited} ms after the last, the gap is {gap}",
                i + 2
            );
        }
    }
}

#[test]
fn a_waiting_job_is_skipped_not_waited_on() {
    let mut rig = Rig::new(queue_settings(5, Backoff::Linear, 60_000));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    rig.publish(producer, "jobs/poison", b"x");
    rig.publish(producer, "jobs/fine", b"y");
    let poison = one_job(&mut rig, worker);
    rig.puback(worker, &poison);
    rig.answer(worker, &poison, "return");
    let next = one_job(&mut rig, worker);
    assert_eq!(next.topic, "jobs/fine");
}

#[test]
fn a_timed_out_job_has_already_served_a_shorter_gap() {
    let mut rig = Rig::new(queue_settings(5, Backoff::Exponential, 2_000));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    let other = rig.connect("other");
    rig.work(worker);
    rig.publish(producer, "jobs/a", b"x");
    rig.work(other);
    let job = one_job(&mut rig, worker);
    let acked_at = rig.now_ms;
    rig.puback(worker, &job);
    rig.advance_to(acked_at + 30_000);
    rig.advance_to(rig.now_ms + 200);
    assert_eq!(attempt(&one_job(&mut rig, other)), 2);
}

#[test]
fn a_poison_job_is_dead_lettered_with_its_headers_and_topic() {
    let mut rig = Rig::new(queue_settings(2, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    let reader = rig.connect("reader");
    let all = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    assert_eq!(
        rig.subscribe_with(reader, "jobs/__dlq/#", all),
        ReasonCode::GRANTED_QOS_1
    );
    rig.work(worker);
    rig.publish(producer, "jobs/resize/42", b"bad");
    for _ in 0..2 {
        let job = one_job(&mut rig, worker);
        rig.puback(worker, &job);
        rig.answer(worker, &job, "return");
        rig.advance_to(rig.now_ms + 200);
    }
    assert!(rig.jobs(worker).is_empty());
    assert!(rig.held_in_store(QUEUE).is_empty());
    let dead = rig.held_in_store("jobs__dlq");
    assert_eq!(dead.len(), 1);
    let letter = &rig.jobs(reader)[0];
    assert_eq!(letter.topic, "jobs/__dlq/resize/42");
    assert_eq!(letter.payload, b"bad");
    for (name, value) in [
        ("saguin-dlq-channel", Some("jobs")),
        ("saguin-dlq-offset", Some("1")),
        ("saguin-dlq-attempts", Some("2")),
        ("saguin-dlq-reason", Some("attempts_exhausted")),
    ] {
        assert_eq!(label(letter, name), value, "{name}");
    }
    for name in [
        "saguin-dlq-first",
        "saguin-dlq-last",
        "saguin-dlq-at",
        "saguin-id",
    ] {
        assert!(
            label(letter, name).is_some_and(|v| !v.is_empty() && v != "0"),
            "{name}"
        );
    }
    // A publish into the dead-letter channel is refused.
    assert_eq!(
        rig.publish(producer, "jobs/__dlq/x", b"forged"),
        ReasonCode::NOT_AUTHORIZED
    );
    // A redrive keeping saguin-id is a new record with a fresh count.
    let id = label(letter, "saguin-id").unwrap().to_string();
    let mut redrive = Publish {
        qos: QoS::AtLeastOnce,
        topic: "jobs/resize/42".into(),
        packet_id: Some(3),
        payload: b"bad".to_vec(),
        ..Publish::default()
    };
    redrive.properties.user_properties = vec![
        ("saguin-id".into(), id.clone()),
        ("saguin-dlq-reason".into(), "copied".into()),
    ];
    rig.packet(producer, Packet::Publish(redrive));
    let job = one_job(&mut rig, worker);
    assert_eq!(label(&job, "saguin-id"), Some(id.as_str()));
    assert_eq!(label(&job, "saguin-offset"), Some("2"));
    assert_eq!(attempt(&job), 1);
    assert_eq!(label(&job, "saguin-dlq-reason"), None);
}

#[test]
fn job_expires_after_dead_letters_waiting_work_and_leaves_leased_work_alone() {
    let mut settings = queue_settings(5, Backoff::None, 0);
    settings.job_expires_after_ms = Some(60_000);
    let mut rig = Rig::new(settings);
    let producer = rig.connect("producer");
    rig.publish(producer, "jobs/taken", b"x");
    rig.publish(producer, "jobs/waiting", b"y");
    rig.advance_to(rig.now_ms + 59_000);
    let worker = rig.connect("worker");
    rig.work(worker);
    let job = one_job(&mut rig, worker);
    assert_eq!(job.topic, "jobs/taken");
    rig.puback(worker, &job);
    rig.advance_to(rig.now_ms + 2_000);
    // The waiting job is past its age: the sweep moves it. The taken one
    // is just as old but out with a worker: left alone.
    assert_eq!(rig.held_in_store(QUEUE).len(), 1);
    assert_eq!(rig.held_in_store("jobs__dlq").len(), 1);
    assert!(rig.jobs(worker).is_empty());
    // Handed back, it expires instead of being offered again.
    rig.answer(worker, &job, "return");
    rig.advance_to(rig.now_ms + 200);
    let dead = rig.held_in_store("jobs__dlq");
    let reasons: Vec<(String, String)> = dead
        .iter()
        .map(|r| {
            let reason = r
                .message
                .user_properties
                .iter()
                .find(|(k, _)| k == "saguin-dlq-reason")
                .unwrap()
                .1
                .clone();
            (r.message.topic.clone(), reason)
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("jobs/__dlq/waiting".to_string(), "expired".to_string()),
            ("jobs/__dlq/taken".to_string(), "expired".to_string())
        ]
    );
    assert!(rig.held_in_store(QUEUE).is_empty());
    assert!(rig.jobs(worker).is_empty());
}

#[test]
fn a_restart_makes_every_held_job_available_with_its_attempts() {
    let mut provider = MemoryProvider::open("m", 64 << 20, 2 << 20, None).unwrap();
    let mut held = Vec::new();
    for (i, attempts) in [(1u64, 1u32), (2, 3)] {
        let message = store::Message::new(
            store::MessageId::from_publisher(&format!("job-{i}")),
            1_700_000_000_000,
            format!("jobs/{i}"),
            b"x".to_vec(),
        );
        let append = Write::Append {
            channel: QUEUE.into(),
            message,
            channel_max_bytes: None,
        };
        provider.commit(&[append]).unwrap();
        held.push(HeldJob {
            offset: i,
            received_at_unix_ms: 1_700_000_000_000,
            attempts,
        });
        let count = Write::PutEntry {
            channel: QUEUE.into(),
            key: attempts_key(i),
            value: attempts.to_be_bytes().to_vec(),
            use_reserve: true,
        };
        provider.commit(&[count]).unwrap();
    }
    let mut settings = queue_settings(3, Backoff::None, 0);
    settings.held = held;
    let mut chans = channels(settings, None);
    chans[0].next = 3;
    let mut rig = Rig::with(chans, provider);
    let worker = rig.connect("worker");
    rig.work(worker);
    let job = one_job(&mut rig, worker);
    assert_eq!(job.topic, "jobs/1");
    assert_eq!(attempt(&job), 2, "the count survived");
    // Job 2 had spent all three attempts: dead-lettered, not restarted.
    assert_eq!(rig.held_in_store("jobs__dlq").len(), 1);
    assert_eq!(
        rig.shell.provider.entry(QUEUE, &attempts_key(2)).unwrap(),
        None
    );
}

#[test]
fn a_full_queue_refuses_publishes_and_still_drains() {
    let mut rig = Rig::with(
        channels(queue_settings(1, Backoff::None, 0), Some(400)),
        MemoryProvider::open("m", 64 << 20, 2 << 20, None).unwrap(),
    );
    let producer = rig.connect("producer");
    let mut accepted = 0;
    loop {
        match rig.publish(producer, "jobs/a", b"0123456789") {
            ReasonCode::SUCCESS => accepted += 1,
            code => {
                assert_eq!(code, ReasonCode::QUOTA_EXCEEDED);
                break;
            }
        }
    }
    assert!(accepted >= 2);
    let worker = rig.connect("worker");
    rig.work(worker);
    // The first job fails its only attempt and is dead-lettered; the rest
    // succeed; the queue empties and takes work again.
    let job = one_job(&mut rig, worker);
    rig.puback(worker, &job);
    rig.answer(worker, &job, "return");
    for _ in 1..accepted {
        rig.advance_to(rig.now_ms + 200);
        let job = one_job(&mut rig, worker);
        rig.puback(worker, &job);
        rig.answer(worker, &job, "ack");
    }
    rig.advance_to(rig.now_ms + 200);
    assert!(rig.held_in_store(QUEUE).is_empty());
    assert_eq!(rig.held_in_store("jobs__dlq").len(), 1);
    assert_eq!(
        rig.publish(producer, "jobs/a", b"0123456789"),
        ReasonCode::SUCCESS
    );
}

#[test]
fn every_subscription_refusal_has_its_code() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let worker = rig.connect("worker");
    let at = |qos: QoS| SubscriptionOptions {
        qos,
        ..SubscriptionOptions::default()
    };
    let cases = [
        (
            "$saguin/queue/jobs/#",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            "$saguin/queue/jobs/w-7",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            "$saguin/queue/#",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            "$saguin/queue/jbos",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            "$saguin/queue/jobs__dlq",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            "jobs/#",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            "jobs/+/x",
            at(QoS::AtLeastOnce),
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (
            FORM,
            at(QoS::AtMostOnce),
            ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR,
        ),
        (
            FORM,
            SubscriptionOptions {
                no_local: true,
                ..at(QoS::AtLeastOnce)
            },
            ReasonCode::TOPIC_FILTER_INVALID,
        ),
        (FORM, at(QoS::ExactlyOnce), ReasonCode::GRANTED_QOS_1),
        ("#", at(QoS::AtLeastOnce), ReasonCode::GRANTED_QOS_1),
        (
            "jobs/__dlq/#",
            at(QoS::AtLeastOnce),
            ReasonCode::GRANTED_QOS_1,
        ),
    ];
    for (filter, options, code) in cases {
        assert_eq!(
            rig.subscribe_with(worker, filter, options),
            code,
            "{filter} {options:?}"
        );
    }
    let old = rig.connect_as("old", ProtocolVersion::V311, u16::MAX);
    assert!(rig
        .subscribe_with(old, FORM, at(QoS::AtLeastOnce))
        .is_error());
}

#[test]
fn a_filter_crossing_a_queue_gets_none_of_its_records_and_retain_is_dropped() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let watcher = rig.connect("watcher");
    let at1 = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    rig.subscribe_with(watcher, "#", at1);
    rig.subscribe_with(watcher, "$share/g/#", at1);
    let mut publish = Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "jobs/a".into(),
        packet_id: Some(1),
        payload: b"x".to_vec(),
        ..Publish::default()
    };
    publish.properties.user_properties = Vec::new();
    rig.packet(producer, Packet::Publish(publish));
    rig.publish(producer, "other/topic", b"broadcast");
    let seen = rig.jobs(watcher);
    let topics: Vec<&str> = seen.iter().map(|p| p.topic.as_str()).collect();
    assert!(!topics.contains(&"jobs/a"), "{topics:?}");
    assert!(topics.contains(&"other/topic"));
    assert_eq!(rig.broker.stats.queue_retain_ignored, 1);
    let worker = rig.connect("worker");
    rig.work(worker);
    assert!(!one_job(&mut rig, worker).retain);
}

#[test]
fn a_will_into_a_queue_becomes_an_ordinary_job() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let worker = rig.connect("worker");
    rig.work(worker);
    let conn = rig
        .broker
        .accept(rig.now_ms, crate::core::Origin::default())
        .unwrap();
    let connect = Connect {
        protocol_version: ProtocolVersion::V5,
        clean_start: true,
        keep_alive_s: 0,
        client_id: "dying".into(),
        will: Some(crate::codec::Will {
            topic: "jobs/cleanup".into(),
            payload: b"device gone".to_vec(),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: Properties::default(),
        }),
        username: None,
        password: None,
        properties: Properties::default(),
    };
    rig.packet(conn, Packet::Connect(Box::new(connect)));
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.shell);
    rig.settle();
    let job = one_job(&mut rig, worker);
    assert_eq!(job.topic, "jobs/cleanup");
    assert_eq!(job.payload, b"device gone");
    assert!(!job.retain);
    assert_eq!(rig.broker.stats.queue_retain_ignored, 1);
}

#[test]
fn an_unsubscribed_worker_is_offered_nothing_more() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    let unsubscribe = crate::codec::Unsubscribe {
        packet_id: 3,
        properties: Properties::default(),
        filters: vec![FORM.into()],
    };
    rig.packet(worker, Packet::Unsubscribe(unsubscribe));
    assert!(
        matches!(rig.take(worker).as_slice(), [Packet::Unsuback(u)] if u.reason_codes == [ReasonCode::SUCCESS])
    );
    rig.publish(producer, "jobs/a", b"x");
    rig.advance_to(rig.now_ms + 1_000);
    assert!(rig.jobs(worker).is_empty());
}

#[test]
fn the_queues_topics_answer_publishes_as_their_kind_says() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let client = rig.connect("client");
    // The form is subscribed to, never published to.
    assert_eq!(
        rig.publish(client, FORM, b"x"),
        ReasonCode::TOPIC_NAME_INVALID
    );
    // A response names a queue; a seek names an append channel.
    assert_eq!(
        rig.publish(client, "$saguin/queue/nope/response", b"ack"),
        ReasonCode::TOPIC_NAME_INVALID
    );
    assert_eq!(
        rig.publish(client, "$saguin/consumer/jobs/seek", b"0"),
        ReasonCode::TOPIC_NAME_INVALID
    );
    // A response naming a queue is taken, whatever it says.
    assert_eq!(rig.publish(client, RESPONSE, b"ack"), ReasonCode::SUCCESS);
}

#[test]
fn a_provider_at_its_append_limit_still_takes_the_dead_letter_move() {
    // No channel bound: the provider itself refuses the next publish.
    let provider = MemoryProvider::open("m", 3_000, 1_000, None).unwrap();
    let mut rig = Rig::with(
        channels(queue_settings(1, Backoff::None, 0), None),
        provider,
    );
    let producer = rig.connect("producer");
    let mut accepted = 0;
    while rig.publish(producer, "jobs/a", &[b'x'; 200]) == ReasonCode::SUCCESS {
        accepted += 1;
    }
    assert!(accepted >= 2);
    let worker = rig.connect("worker");
    rig.work(worker);
    let job = one_job(&mut rig, worker);
    rig.puback(worker, &job);
    rig.answer(worker, &job, "return");
    assert_eq!(
        rig.held_in_store("jobs__dlq").len(),
        1,
        "moved into the reserve"
    );
    assert_eq!(rig.held_in_store(QUEUE).len(), accepted - 1);
}

#[test]
fn a_will_into_a_dead_letter_channel_is_not_stored() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let conn = rig
        .broker
        .accept(rig.now_ms, crate::core::Origin::default())
        .unwrap();
    let connect = Connect {
        protocol_version: ProtocolVersion::V5,
        clean_start: true,
        keep_alive_s: 0,
        client_id: "dying".into(),
        will: Some(crate::codec::Will {
            topic: "jobs/__dlq/forged".into(),
            payload: b"x".to_vec(),
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: Properties::default(),
        }),
        username: None,
        password: None,
        properties: Properties::default(),
    };
    rig.packet(conn, Packet::Connect(Box::new(connect)));
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.shell);
    rig.settle();
    assert!(rig.held_in_store("jobs__dlq").is_empty());
}

#[test]
fn a_backlog_larger_than_the_tail_cache_is_read_back_and_offered_in_order() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    for i in 0..60u8 {
        rig.publish(producer, &format!("jobs/{i}"), &[i; 10_000]);
    }
    let worker = rig.connect("worker");
    rig.work(worker);
    for i in 0..60u8 {
        let job = one_job(&mut rig, worker);
        assert_eq!(job.payload, [i; 10_000]);
        assert_eq!(
            label(&job, "saguin-offset"),
            Some((u64::from(i) + 1).to_string().as_str())
        );
        rig.puback(worker, &job);
        rig.answer(worker, &job, "ack");
    }
    assert!(rig.held_in_store(QUEUE).is_empty());
}

#[test]
fn a_refused_dead_letter_move_leaves_the_job_and_is_tried_again_once_there_is_room() {
    let provider = MemoryProvider::open("m", 4_000, 1, None).unwrap();
    let mut rig = Rig::with(
        channels(queue_settings(1, Backoff::None, 0), None),
        provider,
    );
    let producer = rig.connect("producer");
    // Fill the provider to within a few bytes of its bound.
    let mut accepted = 0;
    for payload_bytes in [300usize, 30, 1] {
        while rig.publish(producer, "jobs/a", &vec![b'x'; payload_bytes]) == ReasonCode::SUCCESS {
            accepted += 1;
        }
    }
    let worker = rig.connect("worker");
    rig.work(worker);
    let poison = one_job(&mut rig, worker);
    rig.puback(worker, &poison);
    rig.answer(worker, &poison, "return");
    // The letter is larger than the job by more than the room left.
    assert!(rig.held_in_store("jobs__dlq").is_empty());
    assert_eq!(rig.held_in_store(QUEUE).len(), accepted, "nothing lost");
    // The next job is offered meanwhile; its ack frees room.
    let next = one_job(&mut rig, worker);
    assert_ne!(
        next.properties.correlation_data,
        poison.properties.correlation_data
    );
    rig.puback(worker, &next);
    rig.answer(worker, &next, "ack");
    rig.advance_to(rig.now_ms + 400);
    assert_eq!(rig.held_in_store("jobs__dlq").len(), 1);
    assert_eq!(rig.held_in_store(QUEUE).len(), accepted - 2);
}

#[test]
fn a_refused_dead_letter_move_keeps_the_stored_attempt_count() {
    let provider = MemoryProvider::open("m", 4_000, 1, None).unwrap();
    let mut rig = Rig::with(
        channels(queue_settings(1, Backoff::None, 0), None),
        provider,
    );
    let producer = rig.connect("producer");
    for payload_bytes in [300usize, 30, 1] {
        while rig.publish(producer, "jobs/a", &vec![b'x'; payload_bytes]) == ReasonCode::SUCCESS {}
    }
    let worker = rig.connect("worker");
    rig.work(worker);
    let poison = one_job(&mut rig, worker);
    let offset = DeliveryId::decode(poison.properties.correlation_data.as_deref().unwrap())
        .unwrap()
        .offset;
    rig.puback(worker, &poison);
    rig.answer(worker, &poison, "return");
    assert!(
        rig.held_in_store("jobs__dlq").is_empty(),
        "the move is refused"
    );
    // The job stays as it was, its spent attempt included: a restart now
    // must still find it exhausted rather than start it over.
    let stored = rig
        .shell
        .provider
        .entry(QUEUE, &attempts_key(offset))
        .unwrap();
    assert_eq!(stored, Some(1u32.to_be_bytes().to_vec()));
}

#[test]
fn an_attempt_count_storage_could_not_take_is_written_on_a_later_tick() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    rig.publish(producer, "jobs/a", b"x");
    let job = one_job(&mut rig, worker);
    let offset = DeliveryId::decode(job.properties.correlation_data.as_deref().unwrap())
        .unwrap()
        .offset;
    rig.shell.busy = true;
    rig.puback(worker, &job);
    rig.advance_to(rig.now_ms + 400);
    rig.shell.busy = false;
    assert_eq!(
        rig.shell
            .provider
            .entry(QUEUE, &attempts_key(offset))
            .unwrap(),
        None
    );
    // Once storage takes writes again the count is stored, so a restart
    // still knows the attempt was spent.
    rig.advance_to(rig.now_ms + 400);
    let stored = rig
        .shell
        .provider
        .entry(QUEUE, &attempts_key(offset))
        .unwrap();
    assert_eq!(stored, Some(1u32.to_be_bytes().to_vec()));
}

#[test]
fn a_shared_subscription_to_a_queues_form_is_refused() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let worker = rig.connect("worker");
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    // A queue's jobs go to the one worker the broker chose, never to a
    // group: the reserved space inside $share/ is refused 0x87, as the
    // specification says of it.
    for filter in ["$share/g/$saguin/queue/jobs", "$share/g/$saguin/queue/#"] {
        assert_eq!(
            rig.subscribe_with(worker, filter, options),
            ReasonCode::NOT_AUTHORIZED,
            "{filter}"
        );
    }
}

#[test]
fn delivery_ids_differ_between_queues() {
    let mut list = channels(queue_settings(5, Backoff::None, 0), None);
    let mut more = channels(queue_settings(5, Backoff::None, 0), None);
    for (channel, (name, filter)) in more
        .iter_mut()
        .zip([("more", "more/#"), ("more__dlq", "more/__dlq/#")])
    {
        channel.name = name.into();
        channel.filters = vec![filter.into()];
        channel.written_filter = filter.into();
    }
    list.extend(more);
    let mut rig = Rig::with(
        list,
        MemoryProvider::open("m", 64 << 20, 2 << 20, None).unwrap(),
    );
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    assert_eq!(
        rig.subscribe_with(worker, "$saguin/queue/more", options),
        ReasonCode::GRANTED_QOS_1
    );
    rig.publish(producer, "jobs/a", b"x");
    rig.publish(producer, "more/a", b"y");
    let jobs = rig.jobs(worker);
    assert_eq!(jobs.len(), 2);
    // Each is its queue's first job at its first offset: the IDs must still
    // differ, since a Delivery ID is unique to its attempt.
    assert_ne!(
        jobs[0].properties.correlation_data,
        jobs[1].properties.correlation_data
    );
}

fn offset_of(job: &Publish) -> u64 {
    DeliveryId::decode(job.properties.correlation_data.as_deref().unwrap())
        .unwrap()
        .offset
}

fn stored_attempts(rig: &Rig, offset: u64) -> u32 {
    rig.shell
        .provider
        .entry(QUEUE, &attempts_key(offset))
        .unwrap()
        .map_or(0, |v| u32::from_be_bytes(v.try_into().unwrap()))
}

#[test]
fn a_job_is_not_offered_again_until_its_attempt_count_is_stored() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    rig.publish(producer, "jobs/a", b"x");
    let job = one_job(&mut rig, worker);
    let offset = offset_of(&job);

    // Returned while its count's write is unanswered: held back, however
    // many ticks pass.
    rig.shell.slow = true;
    rig.puback(worker, &job);
    rig.answer(worker, &job, "return");
    rig.advance_to(rig.now_ms + 1_000);
    assert!(rig.jobs(worker).is_empty(), "offered before its count");
    rig.answer_slow_commits();
    let job = one_job(&mut rig, worker);
    assert_eq!(attempt(&job), 2);
    assert_eq!(stored_attempts(&rig, offset), 1);

    // Timed out while its count's write is unanswered: the same.
    rig.puback(worker, &job);
    rig.advance_to(rig.now_ms + 31_000);
    assert!(rig.jobs(worker).is_empty(), "offered before its count");
    rig.answer_slow_commits();
    let job = one_job(&mut rig, worker);
    assert_eq!(attempt(&job), 3);
    rig.shell.slow = false;

    // A count storage refused waits for the tick that writes it again.
    rig.shell.busy = true;
    rig.puback(worker, &job);
    rig.answer(worker, &job, "return");
    rig.advance_to(rig.now_ms + 1_000);
    assert!(rig.jobs(worker).is_empty(), "offered before its count");
    rig.shell.busy = false;
    rig.advance_to(rig.now_ms + 200);
    assert_eq!(attempt(&one_job(&mut rig, worker)), 4);
    assert_eq!(stored_attempts(&rig, offset), 3);
}

#[test]
fn a_crash_never_finds_fewer_attempts_than_were_handed_out_less_the_last() {
    let settings = queue_settings(50, Backoff::None, 0);
    let mut rig = Rig::new(settings.clone());
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    rig.publish(producer, "jobs/a", b"x");
    rig.shell.slow = true;
    let mut handed_out = 0;
    let mut offset = 0;
    for step in 0..12 {
        for job in rig.jobs(worker) {
            handed_out = attempt(&job);
            offset = offset_of(&job);
            // Answered before the PUBACK on odd steps, after it on even.
            if step % 2 == 0 {
                rig.puback(worker, &job);
                rig.answer(worker, &job, "return");
            } else {
                rig.answer(worker, &job, "return");
                rig.puback(worker, &job);
            }
        }
        // A crash now would find the stored count: only the attempt whose
        // count is still being written may be missing from it.
        assert!(
            stored_attempts(&rig, offset) + 1 >= handed_out,
            "step {step}: {handed_out} handed out, {} stored",
            stored_attempts(&rig, offset)
        );
        rig.advance_to(rig.now_ms + 200);
        if step % 3 == 2 {
            rig.answer_slow_commits();
        }
    }
    assert!(handed_out >= 4, "the job went round: {handed_out}");
    let stored = stored_attempts(&rig, offset);
    let mut rig = rig.crash_and_restart(settings);
    let worker = rig.connect("worker");
    rig.work(worker);
    let job = one_job(&mut rig, worker);
    assert_eq!(attempt(&job), stored + 1);
    assert!(attempt(&job) >= handed_out);
}

#[test]
fn a_due_job_is_offered_at_the_first_tick_at_or_after_its_due_time() {
    // Whatever the phase of the shell's 100 ms tick against the 200 ms
    // offer tick, a gap is honoured on the first tick at or after it ends.
    for phase_ms in [0u64, 30, 99, 100, 150] {
        let mut rig = Rig::new(queue_settings(5, Backoff::Linear, 1_000));
        rig.now_ms = 1_000 + phase_ms;
        let producer = rig.connect("producer");
        let worker = rig.connect("worker");
        rig.work(worker);
        rig.advance_to(rig.now_ms + 100);
        rig.publish(producer, "jobs/a", b"x");
        let job = one_job(&mut rig, worker);
        let returned_at = rig.now_ms;
        rig.puback(worker, &job);
        rig.answer(worker, &job, "return");
        let due = (returned_at + 1_000).div_ceil(200) * 200;
        let first_tick_at_or_after = returned_at + (due - returned_at).div_ceil(100) * 100;
        let mut offered_at = None;
        while offered_at.is_none() && rig.now_ms < returned_at + 5_000 {
            rig.advance_to(rig.now_ms + 100);
            if !rig.jobs(worker).is_empty() {
                offered_at = Some(rig.now_ms);
            }
        }
        assert_eq!(
            offered_at,
            Some(first_tick_at_or_after),
            "phase {phase_ms}: returned at {returned_at}, due at {due}"
        );
    }
}

#[test]
fn a_dead_letter_move_that_cannot_fit_is_retried_each_tick_and_warned_of_once() {
    let provider = MemoryProvider::open("m", 4_000, 1, None).unwrap();
    let mut rig = Rig::with(
        channels(queue_settings(1, Backoff::None, 0), None),
        provider,
    );
    let producer = rig.connect("producer");
    for payload_bytes in [300usize, 30, 1] {
        while rig.publish(producer, "jobs/a", &vec![b'x'; payload_bytes]) == ReasonCode::SUCCESS {}
    }
    let worker = rig.connect("worker");
    rig.work(worker);
    crate::captured_log::start();
    let poison = one_job(&mut rig, worker);
    rig.puback(worker, &poison);
    rig.answer(worker, &poison, "return");
    let next = one_job(&mut rig, worker);
    rig.puback(worker, &next);
    assert!(rig.held_in_store("jobs__dlq").is_empty());
    let tries = rig.shell.moves_tried;
    rig.advance_to(rig.now_ms + 5_000);
    // 25 offer ticks: the move is asked for on each of them.
    assert!(
        rig.shell.moves_tried - tries >= 24,
        "{} moves tried",
        rig.shell.moves_tried - tries
    );
    let warned = crate::captured_log::warnings()
        .into_iter()
        .filter(|w| w.contains("could not be dead-lettered"))
        .count();
    assert_eq!(warned, 1, "{:#?}", crate::captured_log::warnings());
    // Room freed: the next retry moves it.
    rig.answer(worker, &next, "ack");
    rig.advance_to(rig.now_ms + 400);
    assert_eq!(rig.held_in_store("jobs__dlq").len(), 1);
}

/// Defect: a Will aimed at a dead-letter channel or at a topic defined
/// under `$saguin/` was accepted at CONNECT, to be refused (or answered to
/// nobody) when it fired.
#[test]
fn a_will_aimed_at_a_dead_letter_channel_or_saguin_is_refused_0x90_at_connect() {
    let mut rig = Rig::new(queue_settings(3, Backoff::None, 0));
    for topic in [
        "jobs/__dlq/x",
        "$saguin/kv/get",
        "$saguin/queue/jobs/response",
        "$saguin/consumer/events/seek",
    ] {
        let conn = rig
            .broker
            .accept(rig.now_ms, crate::core::Origin::default())
            .unwrap();
        let connect = Connect {
            protocol_version: ProtocolVersion::V5,
            clean_start: true,
            keep_alive_s: 0,
            client_id: "dying".into(),
            will: Some(crate::codec::Will {
                topic: topic.into(),
                payload: b"gone".to_vec(),
                qos: QoS::AtLeastOnce,
                retain: false,
                properties: Properties::default(),
            }),
            username: None,
            password: None,
            properties: Properties::default(),
        };
        rig.packet(conn, Packet::Connect(Box::new(connect)));
        assert!(
            matches!(rig.take(conn).first(), Some(Packet::Connack(c)) if c.reason_code == ReasonCode::TOPIC_NAME_INVALID),
            "{topic}"
        );
    }
}

/// Defect: a dead letter kept its job's original receipt time, so the
/// dead-letter channel's retention could delete it as it arrived.
#[test]
fn a_dead_letter_is_received_when_it_is_filed() {
    let mut rig = Rig::new(queue_settings(1, Backoff::None, 0));
    let producer = rig.connect("producer");
    let worker = rig.connect("worker");
    rig.work(worker);
    rig.publish(producer, "jobs/resize/42", b"bad");
    let published_unix_ms = rig.broker.unix_ms(rig.now_ms);
    rig.advance_to(rig.now_ms + 3_600_000);
    let job = one_job(&mut rig, worker);
    rig.puback(worker, &job);
    rig.answer(worker, &job, "return");
    rig.advance_to(rig.now_ms + 200);
    let filed_by_unix_ms = rig.broker.unix_ms(rig.now_ms);
    let dead = rig.held_in_store("jobs__dlq");
    assert_eq!(dead.len(), 1);
    let received = dead[0].message.received_at_ms;
    assert!(
        received > published_unix_ms + 3_000_000 && received <= filed_by_unix_ms,
        "received {received}, published {published_unix_ms}"
    );
}

/// Core power-cut seed 825: a worker's `ack` was PUBACKed before the job's
/// removal was committed, so a cut in between brought back, and offered
/// again, a job whose worker had been told its answer arrived. The PUBACK
/// now waits for the removal's commit.
#[test]
fn an_acks_puback_waits_for_the_jobs_removal() {
    let mut rig = Rig::new(queue_settings(5, Backoff::None, 0));
    let worker = rig.connect("worker");
    assert_eq!(rig.work(worker), ReasonCode::GRANTED_QOS_1);
    let publisher = rig.connect("publisher");
    assert_eq!(
        rig.publish(publisher, "jobs/a", b"job"),
        ReasonCode::SUCCESS
    );
    let job = rig.jobs(worker).pop().expect("a job");
    rig.puback(worker, &job);
    rig.shell.slow = true;
    let mut answer = Publish {
        qos: QoS::AtLeastOnce,
        topic: RESPONSE.into(),
        packet_id: Some(7),
        payload: b"ack".to_vec(),
        ..Publish::default()
    };
    answer.properties.correlation_data = job.properties.correlation_data.clone();
    rig.packet(worker, Packet::Publish(answer));
    let acked = |rig: &mut Rig| {
        rig.take(worker)
            .iter()
            .any(|p| matches!(p, Packet::Puback(a) if a.packet_id == 7))
    };
    assert!(!acked(&mut rig), "PUBACKed before the removal was stored");
    rig.answer_slow_commits();
    assert!(acked(&mut rig), "PUBACKed once the removal is stored");
    let state = Provider::channel(&rig.shell.provider, QUEUE);
    assert_eq!(state.record_count, 0, "the job is gone");
}
