//! Session records against a real memory provider, answered one storage
//! request at a time, so a test decides exactly which writes a crash lets
//! land.

use std::collections::VecDeque;

use crate::codec::{
    Connack, Connect, Publish, QoS, Subscribe, SubscriptionOptions, Unsubscribe, Will,
};
use crate::core::*;
use crate::store::{Answer, Completion, MemoryProvider, Provider, StoreError, Ticket};

const START_UNIX_MS: u64 = 1_700_000_000_000;

#[derive(Default)]
struct Wire {
    sent: Vec<(Key, Packet)>,
    closed: Vec<Key>,
    queue: VecDeque<StoreRequest>,
    /// The storage thread takes nothing: every request is turned away.
    busy: bool,
}

impl Transport for Wire {
    fn send(&mut self, conn: Key, _: ProtocolVersion, packet: &Packet, _: bool) -> bool {
        self.sent.push((conn, packet.clone()));
        true
    }

    fn close(&mut self, conn: Key) {
        self.closed.push(conn);
    }

    fn store(&mut self, _provider: usize, request: StoreRequest) -> bool {
        if self.busy {
            return false;
        }
        self.queue.push_back(request);
        true
    }
}

/// A broker over a memory provider it reaches only through its requests.
struct Rig {
    broker: Broker,
    wire: Wire,
    disk: MemoryProvider,
    now_ms: u64,
    /// Storage requests answered so far, and how many may be: past the
    /// budget the broker "crashes" with the rest unanswered.
    applied: usize,
    budget: usize,
    /// Answer every commit with a failure instead of applying it.
    failing: bool,
}

fn settings(start_unix_ms: u64) -> Settings {
    Settings {
        session_provider: Some(0),
        retained_provider: Some(0),
        retained_retention_period_s: Some(3600),
        start_unix_ms,
        ..Settings::default()
    }
}

fn empty_disk(max_bytes: u64) -> MemoryProvider {
    MemoryProvider::open("sessions", max_bytes, 0, None).unwrap()
}

impl Rig {
    fn new(disk: MemoryProvider) -> Rig {
        Rig::start(disk, START_UNIX_MS)
    }

    /// A broker starting at `start_unix_ms` on what `disk` kept.
    fn start(disk: MemoryProvider, start_unix_ms: u64) -> Rig {
        Rig::start_with(disk, settings(start_unix_ms))
    }

    /// A broker starting with `settings` on what `disk` kept.
    fn start_with(disk: MemoryProvider, settings: Settings) -> Rig {
        let mut rig = Rig {
            broker: Broker::new(settings),
            wire: Wire::default(),
            disk,
            now_ms: 0,
            applied: 0,
            budget: usize::MAX,
            failing: false,
        };
        let values = rig.disk.entries(RETAINED_SPACE).unwrap();
        rig.broker.restore_retained(values);
        let entries = rig.disk.entries(SESSIONS_SPACE).unwrap();
        let log = read_log(&rig.disk, &entries, 1 << 20).unwrap();
        rig.broker
            .restore_sessions(entries, &log, rig.now_ms, &mut rig.wire);
        let holds = rig
            .disk
            .entries(BROADCAST_SPACE)
            .unwrap()
            .into_iter()
            .filter(|(key, _)| is_hold_key(key))
            .map(|(key, value)| StoredHold {
                provider: 0,
                space: BROADCAST_SPACE.to_string(),
                key,
                value,
            })
            .collect();
        rig.broker.restore_holds(holds, rig.now_ms, &mut rig.wire);
        rig.settle();
        rig
    }

    /// Answers queued requests, in order, within the budget.
    fn settle(&mut self) {
        while self.applied < self.budget {
            let Some(request) = self.wire.queue.pop_front() else {
                return;
            };
            self.applied += 1;
            let (ticket, answer) = match request {
                StoreRequest::Commit { ticket, writes } if self.failing => {
                    let _ = writes;
                    (ticket, Answer::Committed(Err(StoreError::Stopped)))
                }
                StoreRequest::Commit { ticket, writes } => {
                    (ticket, Answer::Committed(self.disk.commit(&writes)))
                }
                other => panic!("a session test made a channel request: {other:?}"),
            };
            let completion = Completion {
                ticket: Ticket(ticket),
                answer,
            };
            self.broker
                .handle_store_completion(completion, self.now_ms, &mut self.wire);
        }
    }

    /// The broker stops without warning: whatever was not answered is lost.
    fn crash(self) -> MemoryProvider {
        self.disk
    }

    fn open(&mut self) -> Key {
        self.broker
            .accept(self.now_ms, crate::core::Origin::default())
            .unwrap()
    }

    /// The broker crashes; a new one starts on what the disk kept, and the
    /// durable client `client_id` connects to it again.
    fn crash_and_resume(self, client_id: &str) -> (Rig, Key) {
        let mut rig = Rig::new(self.crash());
        let conn = rig.connect_as(client_id, true, 3600);
        rig.settle();
        (rig, conn)
    }

    /// A durable client subscribed with `subscribe`, its answers taken.
    fn durable_subscriber(&mut self, client_id: &str, subscribe: Packet) -> Key {
        let conn = self.connect_as(client_id, true, 3600);
        self.packet(conn, subscribe);
        self.settle();
        self.take(conn);
        conn
    }

    /// A durable client subscribed with `subscribe` that has gone away
    /// cleanly, so what follows is owed to it.
    fn away_subscriber(&mut self, client_id: &str, subscribe: Packet) {
        let conn = self.connect_as(client_id, true, 3600);
        self.packet(conn, subscribe);
        self.packet(conn, clean_disconnect());
        self.settle();
    }

    /// Sends `packet`, lets storage answer, and says whether the broker's
    /// reply was one `is_answer` recognises.
    fn answered(&mut self, conn: Key, packet: Packet, is_answer: fn(&Packet) -> bool) -> bool {
        self.packet(conn, packet);
        self.settle();
        self.take(conn).iter().any(is_answer)
    }

    /// A new connection that has sent its CONNECT; the answer comes once
    /// the rig settles.
    fn connect_as(&mut self, client_id: &str, durable: bool, expiry_s: u32) -> Key {
        let conn = self.open();
        self.packet(
            conn,
            Packet::Connect(Box::new(connect(client_id, durable, expiry_s))),
        );
        conn
    }

    fn packet(&mut self, conn: Key, packet: Packet) {
        self.broker
            .handle_packet(conn, packet, self.now_ms, &mut self.wire);
    }

    fn take(&mut self, conn: Key) -> Vec<Packet> {
        let (mine, rest) = std::mem::take(&mut self.wire.sent)
            .into_iter()
            .partition(|(k, _)| *k == conn);
        self.wire.sent = rest;
        mine.into_iter().map(|(_, p)| p).collect()
    }

    fn connack(&mut self, conn: Key) -> Option<Connack> {
        self.take(conn).into_iter().find_map(|p| match p {
            Packet::Connack(c) => Some(c),
            _ => None,
        })
    }

    fn tick_to(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        self.broker.tick(now_ms, &mut self.wire);
        self.settle();
    }

    /// A clean client that sees every publish on `filter`.
    fn watcher(&mut self, filter: &str) -> Key {
        let conn = self.connect_as("watcher", false, 0);
        self.settle();
        assert!(self.connack(conn).is_some());
        self.packet(conn, subscribe(filter));
        self.settle();
        self.take(conn);
        conn
    }

    fn publishes_to(&mut self, conn: Key) -> Vec<Publish> {
        self.take(conn)
            .into_iter()
            .filter_map(|p| match p {
                Packet::Publish(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn stored_record(&self, client_id: &str) -> Option<SessionRecord> {
        self.disk
            .entry(SESSIONS_SPACE, client_id)
            .unwrap()
            .map(|bytes| SessionRecord::from_bytes(&bytes).unwrap())
    }
}

use crate::core::broadcast::log::window_key;
use crate::core::session::record::SessionRecord;

fn connect(client_id: &str, durable: bool, expiry_s: u32) -> Connect {
    Connect {
        protocol_version: ProtocolVersion::V5,
        clean_start: !durable,
        keep_alive_s: 0,
        client_id: client_id.into(),
        will: None,
        username: None,
        password: None,
        properties: Properties {
            session_expiry_interval_s: Some(expiry_s).filter(|&s| s > 0),
            ..Properties::default()
        },
    }
}

fn will(delay_s: u32) -> Will {
    Will {
        topic: "wills/device".into(),
        payload: b"gone".to_vec(),
        qos: QoS::AtLeastOnce,
        retain: false,
        properties: Properties {
            will_delay_interval_s: Some(delay_s).filter(|&s| s > 0),
            ..Properties::default()
        },
    }
}

fn subscribe(filter: &str) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id: 3,
        properties: Properties::default(),
        filters: vec![(
            filter.into(),
            SubscriptionOptions {
                qos: QoS::AtLeastOnce,
                ..SubscriptionOptions::default()
            },
        )],
    })
}

fn unsubscribe(filter: &str) -> Packet {
    Packet::Unsubscribe(Unsubscribe {
        packet_id: 4,
        properties: Properties::default(),
        filters: vec![filter.into()],
    })
}

fn clean_disconnect() -> Packet {
    Packet::Disconnect(Disconnect {
        reason_code: ReasonCode::SUCCESS,
        properties: Properties::default(),
    })
}

fn publish(topic: &str) -> Packet {
    Packet::Publish(Publish {
        topic: topic.into(),
        payload: b"x".to_vec(),
        ..Publish::default()
    })
}

#[test]
fn the_connack_waits_for_the_record_and_packets_sent_meanwhile_wait_in_order() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", true, 60);
    rig.packet(conn, subscribe("a/#"));
    rig.packet(conn, Packet::Pingreq);
    assert!(rig.take(conn).is_empty(), "answered before the commit");
    rig.settle();
    let answers = rig.take(conn);
    assert!(
        matches!(
            answers.as_slice(),
            [Packet::Connack(c), Packet::Suback(s), Packet::Pingresp]
                if !c.session_present && s.reason_codes == [ReasonCode::GRANTED_QOS_1]
        ),
        "{answers:?}"
    );
    let record = rig.stored_record("device").expect("stored");
    assert_eq!(record.expiry_interval_s, 60);
    assert_eq!(record.disconnected_unix_ms, None);
    assert_eq!(record.subscriptions[0].filter, "a/#");
}

#[test]
fn a_session_that_ends_with_its_connection_writes_nothing() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", false, 0);
    assert!(rig.connack(conn).is_some(), "answered at once");
    assert!(rig.wire.queue.is_empty());
}

#[test]
fn a_failed_write_refuses_the_connect_with_0x83_and_keeps_no_session() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    rig.failing = true;
    let conn = rig.connect_as("device", true, 60);
    rig.settle();
    let connack = rig.connack(conn).unwrap();
    assert_eq!(
        connack.reason_code,
        ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR
    );
    assert!(rig.wire.closed.contains(&conn));
    assert_eq!(rig.broker.session_count(), 0);
}

#[test]
fn a_full_store_refuses_a_will_with_0x97_and_a_bare_session_is_told_it_ends() {
    let mut rig = Rig::new(empty_disk(16));
    let conn = rig.open();
    let mut with_will = connect("device", true, 60);
    with_will.will = Some(will(0));
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.settle();
    assert_eq!(
        rig.connack(conn).unwrap().reason_code,
        ReasonCode::QUOTA_EXCEEDED
    );
    let conn = rig.connect_as("device", true, 60);
    rig.settle();
    let connack = rig.connack(conn).unwrap();
    assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
    assert_eq!(connack.properties.session_expiry_interval_s, Some(0));
    assert_eq!(rig.broker.stats().sessions_dropped_storage_full, 1);
    rig.packet(conn, clean_disconnect());
    rig.settle();
    assert_eq!(
        rig.broker.session_count(),
        0,
        "it ended with its connection"
    );
}

#[test]
fn a_refused_subscribe_write_is_answered_per_filter_and_changes_nothing() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", true, 60);
    rig.settle();
    rig.take(conn);
    rig.failing = true;
    rig.packet(conn, subscribe("a/#"));
    rig.settle();
    let answers = rig.take(conn);
    assert!(
        matches!(answers.as_slice(), [Packet::Suback(s)]
            if s.reason_codes == [ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR]),
        "{answers:?}"
    );
    rig.failing = false;
    let publisher = rig.watcher("nothing");
    rig.packet(publisher, publish("a/b"));
    assert!(rig.publishes_to(conn).is_empty(), "subscribed after all");
    // An UNSUBSCRIBE the store refuses leaves the filter subscribed.
    rig.packet(conn, subscribe("a/#"));
    rig.settle();
    rig.take(conn);
    rig.failing = true;
    rig.packet(conn, unsubscribe("a/#"));
    rig.settle();
    let answers = rig.take(conn);
    assert!(
        matches!(answers.as_slice(), [Packet::Unsuback(u)]
            if u.reason_codes == [ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR]),
        "{answers:?}"
    );
    rig.packet(publisher, publish("a/b"));
    assert_eq!(rig.publishes_to(conn).len(), 1);
}

#[test]
fn a_background_write_the_store_refused_is_written_again_every_second() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", true, 60);
    rig.settle();
    rig.failing = true;
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.wire);
    rig.settle();
    assert_eq!(
        rig.stored_record("device").unwrap().disconnected_unix_ms,
        None
    );
    rig.failing = false;
    rig.tick_to(500);
    assert_eq!(
        rig.stored_record("device").unwrap().disconnected_unix_ms,
        None
    );
    rig.tick_to(1_000);
    assert_eq!(
        rig.stored_record("device").unwrap().disconnected_unix_ms,
        Some(START_UNIX_MS)
    );
}

#[test]
fn subscriptions_come_back_after_a_crash_with_session_present() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", true, 60);
    rig.packet(conn, subscribe("a/#"));
    rig.settle();
    let disk = rig.crash();
    let mut rig = Rig::new(disk);
    let conn = rig.connect_as("device", true, 60);
    rig.settle();
    assert!(rig.connack(conn).unwrap().session_present);
    let publisher = rig.watcher("nothing");
    rig.packet(publisher, publish("a/b"));
    assert_eq!(rig.publishes_to(conn).len(), 1);
}

#[test]
fn a_delayed_will_resumes_what_is_left_of_its_wait_after_a_restart() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.open();
    let mut with_will = connect("device", true, 3600);
    with_will.will = Some(will(10));
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.settle();
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.wire);
    rig.settle();
    // Back three seconds later: seven are left.
    let mut rig = Rig::start(rig.crash(), START_UNIX_MS + 3_000);
    let watcher = rig.watcher("wills/#");
    rig.tick_to(6_900);
    assert!(rig.publishes_to(watcher).is_empty(), "published early");
    rig.tick_to(7_000);
    assert_eq!(rig.publishes_to(watcher).len(), 1);
    // Taken off the record once published.
    assert!(rig.stored_record("device").unwrap().will.is_none());
    // Back after the moment: published at the start, to a session that
    // keeps its own record and so is there to be owed it.
    let mut rig = Rig::new(empty_disk(1 << 20));
    let away = rig.connect_as("a-listener", true, 3600);
    rig.packet(away, subscribe("wills/#"));
    rig.packet(away, clean_disconnect());
    let conn = rig.open();
    let mut with_will = connect("device", true, 3600);
    with_will.will = Some(will(10));
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.settle();
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.wire);
    rig.settle();
    let mut rig = Rig::start(rig.crash(), START_UNIX_MS + 60_000);
    assert!(
        rig.stored_record("device").unwrap().will.is_none(),
        "published at the start and taken off the record"
    );
    let listener = rig.connect_as("a-listener", true, 3600);
    rig.settle();
    let answers = rig.take(listener);
    assert!(
        matches!(answers.as_slice(), [Packet::Connack(c), Packet::Publish(p)]
            if c.session_present && p.topic == "wills/device"),
        "{answers:?}"
    );
}

#[test]
fn a_will_whose_connection_the_stop_cut_waits_for_the_session_to_expire() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.open();
    let mut with_will = connect("device", true, 60);
    with_will.will = Some(will(5));
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.settle();
    let mut rig = Rig::new(rig.crash());
    let watcher = rig.watcher("wills/#");
    rig.tick_to(59_900);
    assert!(
        rig.publishes_to(watcher).is_empty(),
        "no moment: not due yet"
    );
    rig.tick_to(60_000);
    assert_eq!(rig.publishes_to(watcher).len(), 1);
    assert!(rig.stored_record("device").is_none(), "the session ended");
}

#[test]
fn a_session_that_expired_while_stopped_is_ended_and_a_will_without_a_moment_goes_with_it() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.open();
    let mut with_will = connect("device", true, 60);
    with_will.will = Some(will(5));
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.packet(conn, subscribe("a/#"));
    rig.settle();
    // Cut by a stop, and away longer than its expiry? No: a session cut by
    // the stop counts its expiry from the start; one that went away before
    // the stop counts it from then.
    let other = rig.connect_as("gone", true, 10);
    rig.settle();
    rig.packet(other, clean_disconnect());
    rig.settle();
    let mut rig = Rig::start(rig.crash(), START_UNIX_MS + 11_000);
    assert!(rig.stored_record("gone").is_none(), "expired while stopped");
    assert!(rig.stored_record("device").is_some());
    let conn = rig.connect_as("gone", true, 10);
    rig.settle();
    assert!(!rig.connack(conn).unwrap().session_present);
}

/// One scripted client's life, crashed after every possible number of
/// storage writes: whatever the client was told is what the restarted
/// broker holds, and its Will is published at most once per arming.
#[test]
fn a_crash_at_every_storage_write_loses_nothing_the_client_was_told() {
    // What the client was told, in order, for the checks after the crash.
    #[derive(Debug, Default, Clone)]
    struct Told {
        connacks: usize,
        subscribed_b: bool,
        unsubscribed_a: bool,
        subscribed_a: bool,
        clean_close: bool,
        reconnected: bool,
        dropped: bool,
    }

    fn run(budget: usize) -> (MemoryProvider, Told, bool) {
        let mut rig = Rig::new(empty_disk(1 << 20));
        rig.budget = budget;
        let mut told = Told::default();
        let mut with_will = connect("device", true, 3600);
        with_will.will = Some(will(30));
        let conn = rig.open();
        rig.packet(conn, Packet::Connect(Box::new(with_will.clone())));
        rig.settle();
        let answers = rig.take(conn);
        if answers.iter().any(|p| matches!(p, Packet::Connack(_))) {
            told.connacks += 1;
            told.subscribed_a =
                rig.answered(conn, subscribe("a/#"), |p| matches!(p, Packet::Suback(_)));
        }
        if told.subscribed_a {
            told.subscribed_b =
                rig.answered(conn, subscribe("b/#"), |p| matches!(p, Packet::Suback(_)));
        }
        if told.subscribed_b {
            told.unsubscribed_a = rig.answered(conn, unsubscribe("a/#"), |p| {
                matches!(p, Packet::Unsuback(_))
            });
        }
        if told.unsubscribed_a {
            rig.packet(conn, clean_disconnect());
            rig.settle();
            told.clean_close = rig.wire.closed.contains(&conn);
        }
        // A crash right at the clean close is checked before anything else
        // is sent.
        if told.clean_close && rig.applied < rig.budget {
            let conn = rig.open();
            rig.packet(conn, Packet::Connect(Box::new(with_will)));
            rig.settle();
            told.reconnected = rig
                .take(conn)
                .iter()
                .any(|p| matches!(p, Packet::Connack(c) if c.session_present));
            if told.reconnected {
                rig.broker
                    .handle_connection_lost(conn, rig.now_ms, &mut rig.wire);
                rig.settle();
                told.dropped = true;
            }
        }
        let finished = rig.wire.queue.is_empty() && told.dropped;
        (rig.crash(), told, finished)
    }

    let mut budget = 0;
    loop {
        let (disk, told, finished) = run(budget);
        let record = disk
            .entry(SESSIONS_SPACE, "device")
            .unwrap()
            .map(|b| SessionRecord::from_bytes(&b).unwrap());
        let filters: Vec<String> = record
            .iter()
            .flat_map(|r| r.subscriptions.iter().map(|s| s.filter.clone()))
            .collect();
        let case = format!("after {budget} writes, told {told:?}, stored {record:?}");
        if told.connacks > 0 {
            assert!(record.is_some(), "{case}");
        }
        if told.subscribed_a && !told.unsubscribed_a {
            assert!(filters.contains(&"a/#".to_string()), "{case}");
        }
        if told.unsubscribed_a {
            assert!(!filters.contains(&"a/#".to_string()), "{case}");
        }
        if told.subscribed_b {
            assert!(filters.contains(&"b/#".to_string()), "{case}");
        }
        if told.clean_close && !told.reconnected {
            let will = record.as_ref().and_then(|r| r.will.as_ref());
            assert!(will.is_none(), "a withdrawn Will survived: {case}");
        }

        // The restarted broker, run past every moment: a Will is published
        // only where one was armed and not withdrawn, and at most once.
        let mut rig = Rig::start(disk, START_UNIX_MS + 1_000);
        let watcher = rig.watcher("wills/#");
        rig.tick_to(4_000_000_000);
        let wills = rig.publishes_to(watcher).len();
        assert!(wills <= 1, "{case}: published {wills} times");
        if told.dropped {
            assert_eq!(wills, 1, "{case}: the armed Will was lost");
        }
        if told.clean_close && !told.reconnected {
            assert_eq!(wills, 0, "{case}: a withdrawn Will was published");
        }
        if finished {
            break;
        }
        budget += 1;
        assert!(budget < 100, "the script never finished");
    }
    assert!(
        budget >= 6,
        "the script made too few writes to mean anything"
    );
}

fn retained_publish(topic: &str, payload: &[u8]) -> Packet {
    Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: topic.into(),
        packet_id: Some(9),
        payload: payload.to_vec(),
        ..Publish::default()
    })
}

#[test]
fn a_retained_publish_is_acknowledged_and_routed_once_its_value_is_kept() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let watcher = rig.watcher("state/#");
    let conn = rig.connect_as("setter", false, 0);
    rig.take(conn);
    rig.packet(conn, retained_publish("state/lamp", b"on"));
    assert!(rig.take(conn).is_empty(), "acknowledged before the commit");
    assert!(
        rig.publishes_to(watcher).is_empty(),
        "routed before the commit"
    );
    rig.settle();
    assert!(
        matches!(rig.take(conn).as_slice(), [Packet::Puback(ack)] if ack.reason_code == ReasonCode::SUCCESS)
    );
    assert_eq!(rig.publishes_to(watcher).len(), 1);
    assert!(rig
        .disk
        .entry(RETAINED_SPACE, "state/lamp")
        .unwrap()
        .is_some());
    // Restarted, the value is served to a new subscriber with RETAIN.
    let mut rig = Rig::new(rig.crash());
    let reader = rig.connect_as("reader", false, 0);
    rig.packet(reader, subscribe("state/#"));
    let served = rig.publishes_to(reader);
    assert!(
        matches!(served.as_slice(), [p] if p.retain && p.payload == b"on"),
        "{served:?}"
    );
    // retention_period removes it from memory and from the provider.
    rig.tick_to(3_600_000);
    assert!(rig
        .disk
        .entry(RETAINED_SPACE, "state/lamp")
        .unwrap()
        .is_none());
}

#[test]
fn a_retained_value_its_provider_has_no_room_for_is_refused_0x97_and_not_delivered() {
    let mut rig = Rig::new(empty_disk(64));
    let watcher = rig.watcher("state/#");
    let conn = rig.connect_as("setter", false, 0);
    rig.take(conn);
    rig.packet(conn, retained_publish("state/lamp", &[7; 200]));
    rig.settle();
    assert!(
        matches!(rig.take(conn).as_slice(), [Packet::Puback(ack)] if ack.reason_code == ReasonCode::QUOTA_EXCEEDED)
    );
    assert!(rig.publishes_to(watcher).is_empty());
    assert_eq!(rig.broker.retained.len(), 0);
}

fn qos1_publish(topic: &str, packet_id: u16) -> Packet {
    Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(packet_id),
        payload: b"m".to_vec(),
        ..Publish::default()
    })
}

#[test]
fn a_qos1_broadcast_owed_to_a_durable_session_is_logged_before_its_puback_and_replayed_once() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    rig.away_subscriber("keeper", subscribe("a/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.take(publisher);
    // Owed to nobody durable: answered at once, nothing written.
    rig.packet(publisher, qos1_publish("b/1", 1));
    assert!(rig.wire.queue.is_empty());
    assert!(matches!(
        rig.take(publisher).as_slice(),
        [Packet::Puback(_)]
    ));
    rig.packet(publisher, qos1_publish("a/1", 2));
    rig.packet(publisher, qos1_publish("a/2", 3));
    assert!(
        rig.take(publisher).is_empty(),
        "acknowledged before the log write"
    );
    rig.settle();
    assert_eq!(rig.take(publisher).len(), 2);

    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let answers = rig.take(keeper);
    let topics: Vec<_> = answers
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.topic.as_str()),
            _ => None,
        })
        .collect();
    assert!(matches!(answers.first(), Some(Packet::Connack(c)) if c.session_present));
    assert_eq!(topics, ["a/1", "a/2"]);
    // Acknowledged, and the cursor stored within ack_commit_interval: a
    // crash after that sends neither again.
    for packet in answers {
        if let Packet::Publish(p) = packet {
            let ack = crate::codec::PubAck {
                packet_id: p.packet_id.unwrap(),
                ..Default::default()
            };
            rig.packet(keeper, Packet::Puback(ack));
        }
    }
    rig.tick_to(200);
    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let answers = rig.take(keeper);
    assert!(
        matches!(answers.as_slice(), [Packet::Connack(c)] if c.session_present),
        "{answers:?}"
    );
}

fn pubrel(packet_id: u16) -> Packet {
    Packet::Pubrel(crate::codec::PubAck {
        packet_id,
        ..Default::default()
    })
}

fn qos2_publish(topic: &str, packet_id: u16) -> Packet {
    Packet::Publish(Publish {
        qos: QoS::ExactlyOnce,
        topic: topic.into(),
        packet_id: Some(packet_id),
        payload: b"once".to_vec(),
        ..Publish::default()
    })
}

#[test]
fn an_exactly_once_publish_held_at_a_crash_is_released_once_after_it() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let sender = rig.connect_as("sender", true, 3600);
    rig.settle();
    rig.take(sender);
    rig.packet(sender, qos2_publish("x/1", 5));
    assert!(
        rig.take(sender).is_empty(),
        "PUBREC before the hold was stored"
    );
    rig.settle();
    assert!(
        matches!(rig.take(sender).as_slice(), [Packet::Pubrec(ack)] if ack.reason_code == ReasonCode::SUCCESS)
    );

    let mut rig = Rig::new(rig.crash());
    let watcher = rig.watcher("x/#");
    let sender = rig.connect_as("sender", true, 3600);
    rig.settle();
    assert!(rig.connack(sender).unwrap().session_present);
    rig.packet(sender, pubrel(5));
    assert!(
        rig.publishes_to(watcher).is_empty(),
        "released before its commit"
    );
    rig.settle();
    assert!(
        matches!(rig.take(sender).as_slice(), [Packet::Pubcomp(ack)] if ack.reason_code == ReasonCode::SUCCESS)
    );
    assert_eq!(rig.publishes_to(watcher).len(), 1);

    // A crash after the release, before its PUBCOMP reached the client:
    // the PUBREL sent again finds nothing, and nothing is delivered twice.
    let mut rig = Rig::new(rig.crash());
    let watcher = rig.watcher("x/#");
    let sender = rig.connect_as("sender", true, 3600);
    rig.settle();
    rig.take(sender);
    rig.packet(sender, pubrel(5));
    rig.settle();
    assert!(matches!(rig.take(sender).as_slice(), [Packet::Pubcomp(ack)]
        if ack.reason_code == ReasonCode::PACKET_IDENTIFIER_NOT_FOUND));
    assert!(rig.publishes_to(watcher).is_empty());
}

#[test]
fn a_hold_whose_session_did_not_come_back_is_dropped_and_counted_at_the_start() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let sender = rig.connect_as("sender", true, 1);
    rig.packet(sender, qos2_publish("x/1", 5));
    rig.settle();
    rig.broker
        .handle_connection_lost(sender, rig.now_ms, &mut rig.wire);
    rig.settle();
    let rig = Rig::start(rig.crash(), START_UNIX_MS + 5_000);
    assert_eq!(rig.broker.stats().qos2_abandoned, 1);
    let left = rig.disk.entries(BROADCAST_SPACE).unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_shared_groups_backlog_kept_for_a_durable_member_survives_a_crash() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    rig.away_subscriber("worker", subscribe("$share/g/jobs/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.take(publisher);
    rig.packet(publisher, qos1_publish("jobs/1", 1));
    rig.packet(publisher, qos1_publish("jobs/2", 2));
    assert!(
        rig.take(publisher).is_empty(),
        "acknowledged before the log write"
    );
    rig.settle();
    assert_eq!(rig.take(publisher).len(), 2);
    rig.tick_to(200);

    let (mut rig, worker) = rig.crash_and_resume("worker");
    let answers = rig.take(worker);
    assert!(matches!(answers.first(), Some(Packet::Connack(c)) if c.session_present));
    let topics: Vec<_> = answers
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.topic.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(topics, ["jobs/1", "jobs/2"]);
}

#[test]
fn a_logged_message_on_the_wire_at_a_crash_is_sent_again_under_its_packet_identifier() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe("a/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    // Two on the wire, neither acknowledged.
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.packet(publisher, qos1_publish("a/2", 2));
    rig.settle();
    let sent: Vec<(String, u16)> = rig
        .publishes_to(keeper)
        .into_iter()
        .map(|p| (p.topic, p.packet_id.unwrap()))
        .collect();
    assert_eq!(sent.len(), 2);
    rig.tick_to(200);

    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let again: Vec<(String, u16, bool)> = rig
        .publishes_to(keeper)
        .into_iter()
        .map(|p| (p.topic, p.packet_id.unwrap(), p.dup))
        .collect();
    let expected: Vec<_> = sent.into_iter().map(|(t, id)| (t, id, true)).collect();
    assert_eq!(again, expected);
}

/// A storage thread too far behind to take a window write holds the
/// delivery back until it can, and never costs the subscriber its
/// connection: the write is tried again at the next interval.
#[test]
fn a_window_write_the_storage_thread_cannot_take_yet_delays_the_delivery_and_keeps_the_connection()
{
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe("a/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    // The log append is taken; the window write behind it is not.
    rig.wire.busy = true;
    rig.settle();
    assert!(
        rig.take(keeper).is_empty(),
        "nothing goes on the wire, and nothing ends the connection, while its window waits"
    );
    assert!(!rig.wire.closed.contains(&keeper));
    rig.wire.busy = false;
    rig.tick_to(200);
    let sent: Vec<(String, u16)> = rig
        .publishes_to(keeper)
        .into_iter()
        .map(|p| (p.topic, p.packet_id.unwrap()))
        .collect();
    assert_eq!(sent.len(), 1, "the delivery goes once its window is stored");
    assert!(!rig.wire.closed.contains(&keeper));

    // Its identifier was stored: a crash now sends it again under it.
    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let again: Vec<(String, u16, bool)> = rig
        .publishes_to(keeper)
        .into_iter()
        .map(|p| (p.topic, p.packet_id.unwrap(), p.dup))
        .collect();
    assert_eq!(again, vec![(sent[0].0.clone(), sent[0].1, true)]);
}

/// Whichever storage write a crash stops at, a QoS 1 message the
/// subscriber saw is sent again after the restart under the identifier it
/// saw, with DUP: none goes on the wire before its window is stored.
#[test]
fn a_qos1_delivery_is_sent_only_under_a_stored_identifier_whatever_write_a_crash_stops_at() {
    let mut budget = 0;
    loop {
        let mut rig = Rig::new(empty_disk(1 << 20));
        let keeper = rig.durable_subscriber("keeper", subscribe("a/#"));
        rig.budget = rig.applied + budget;
        let publisher = rig.connect_as("publisher", false, 0);
        rig.packet(publisher, qos1_publish("a/1", 1));
        rig.packet(publisher, qos1_publish("a/2", 2));
        rig.settle();
        let acknowledged = rig
            .take(publisher)
            .iter()
            .filter(|p| matches!(p, Packet::Puback(_)))
            .count();
        let sent: Vec<(String, u16)> = rig
            .publishes_to(keeper)
            .into_iter()
            .map(|p| (p.topic, p.packet_id.unwrap()))
            .collect();
        let finished = rig.wire.queue.is_empty();
        let case = format!("after {budget} writes, {acknowledged} acknowledged, sent {sent:?}");

        let (mut rig, keeper) = rig.crash_and_resume("keeper");
        let again: Vec<(String, u16, bool)> = rig
            .publishes_to(keeper)
            .into_iter()
            .map(|p| (p.topic, p.packet_id.unwrap(), p.dup))
            .collect();
        for (topic, id) in &sent {
            assert!(
                again.contains(&(topic.clone(), *id, true)),
                "{case}: {topic} was not sent again under {id} with DUP: {again:?}"
            );
        }
        assert!(
            again.len() >= acknowledged,
            "{case}: an acknowledged message was lost: {again:?}"
        );
        if finished {
            break;
        }
        budget += 1;
    }
}

fn subscribe_qos2(filter: &str) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id: 3,
        properties: Properties::default(),
        filters: vec![(
            filter.into(),
            SubscriptionOptions {
                qos: QoS::ExactlyOnce,
                ..SubscriptionOptions::default()
            },
        )],
    })
}

#[test]
fn a_qos2_broadcast_to_a_durable_session_resumes_at_its_stage_after_a_crash() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe_qos2("q/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos2_publish("q/1", 1));
    rig.packet(publisher, qos2_publish("q/2", 2));
    rig.packet(publisher, pubrel(1));
    rig.packet(publisher, pubrel(2));
    assert!(
        rig.publishes_to(keeper).is_empty(),
        "delivered before the log write"
    );
    // The two releases are logged; the window naming the deliveries is not
    // stored yet, so nothing is on the wire.
    rig.budget = rig.applied + 2;
    rig.settle();
    assert!(
        rig.publishes_to(keeper).is_empty(),
        "sent before its window was stored"
    );
    rig.budget = usize::MAX;
    rig.settle();
    let sent = rig.publishes_to(keeper);
    assert_eq!(sent.len(), 2);
    // The first is answered PUBREC: its PUBREL waits for that to be stored.
    let first = sent[0].packet_id.unwrap();
    let second = sent[1].packet_id.unwrap();
    rig.packet(
        keeper,
        Packet::Pubrec(crate::codec::PubAck {
            packet_id: first,
            ..Default::default()
        }),
    );
    assert!(
        rig.take(keeper).is_empty(),
        "PUBREL before the PUBREC was stored"
    );
    rig.settle();
    assert!(matches!(rig.take(keeper).as_slice(), [Packet::Pubrel(r)] if r.packet_id == first));

    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let answers = rig.take(keeper);
    // The first resumes at its PUBREL, never as a new message; the second
    // is sent again under its identifier.
    assert!(
        matches!(answers.as_slice(), [Packet::Connack(_), Packet::Pubrel(r), Packet::Publish(p)]
            if r.packet_id == first && p.packet_id == Some(second) && p.dup && p.qos == QoS::ExactlyOnce),
        "{answers:?}"
    );
}

#[test]
fn a_retained_publish_and_a_will_owed_to_a_durable_session_are_logged_too() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    rig.away_subscriber("keeper", subscribe("#"));
    let setter = rig.connect_as("setter", false, 0);
    rig.packet(setter, retained_publish("state/lamp", b"on"));
    let device = rig.open();
    let mut with_will = connect("device", false, 0);
    with_will.will = Some(will(0));
    rig.packet(device, Packet::Connect(Box::new(with_will)));
    rig.settle();
    rig.broker
        .handle_connection_lost(device, rig.now_ms, &mut rig.wire);
    rig.settle();
    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let topics: Vec<_> = rig
        .publishes_to(keeper)
        .into_iter()
        .map(|p| p.topic)
        .collect();
    assert_eq!(topics, ["state/lamp", "wills/device"]);
}

/// Six 300-byte messages at `qos` into a log with room for fewer, for a
/// durable subscriber away: each publish is answered in full, the loss is
/// counted, and after a crash the subscriber is sent the newest, not all.
fn a_full_log_keeps_the_newest(qos: QoS) {
    let mut rig = Rig::new(empty_disk(2_000));
    let keeper = rig.connect_as("keeper", true, 3600);
    let subscription = match qos {
        QoS::ExactlyOnce => subscribe_qos2("a/#"),
        _ => subscribe("a/#"),
    };
    rig.packet(keeper, subscription);
    rig.packet(keeper, clean_disconnect());
    rig.settle();
    let publisher = rig.connect_as("publisher", false, 0);
    rig.take(publisher);
    for n in 1..=6u16 {
        rig.packet(
            publisher,
            Packet::Publish(Publish {
                qos,
                topic: format!("a/{n}"),
                packet_id: Some(n),
                payload: vec![7; 300],
                ..Publish::default()
            }),
        );
        if qos == QoS::ExactlyOnce {
            rig.packet(publisher, pubrel(n));
        }
        rig.settle();
    }
    let answered = rig
        .take(publisher)
        .into_iter()
        .filter(|p| match p {
            Packet::Puback(a) => a.reason_code == ReasonCode::SUCCESS,
            Packet::Pubcomp(_) => true,
            _ => false,
        })
        .count();
    assert_eq!(answered, 6);
    assert!(rig.broker.stats().log_dropped > 0, "the loss is counted");
    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let topics: Vec<String> = rig
        .publishes_to(keeper)
        .into_iter()
        .map(|p| p.topic)
        .collect();
    assert!(
        topics.len() < 6 && topics.last().map(String::as_str) == Some("a/6"),
        "{topics:?}"
    );
}

#[test]
fn a_full_log_gives_up_its_oldest_messages_for_a_new_one() {
    a_full_log_keeps_the_newest(QoS::AtLeastOnce);
}

/// A publisher and an away subscriber, both durable, crashed after every
/// possible number of storage writes: every QoS 1 message acknowledged to
/// its publisher reaches the subscriber after the restart, and the QoS 2
/// one reaches it exactly once whenever its publisher was told PUBREC, and
/// never twice.
#[test]
fn a_crash_at_every_write_of_a_publish_loses_no_acknowledged_message_and_doubles_no_qos2() {
    #[derive(Debug, Default)]
    struct Told {
        connack: bool,
        puback: bool,
        pubrec: bool,
        pubcomp: bool,
    }

    fn received(rig: &mut Rig, conn: Key) -> Vec<Publish> {
        rig.take(conn)
            .into_iter()
            .filter_map(|p| match p {
                Packet::Publish(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    let mut budget = 0;
    loop {
        let mut rig = Rig::new(empty_disk(1 << 20));
        rig.away_subscriber("keeper", subscribe_qos2("#"));
        rig.budget = rig.applied + budget;
        let mut told = Told::default();
        let sender = rig.connect_as("sender", true, 3600);
        rig.settle();
        told.connack = rig.connack(sender).is_some();
        if told.connack {
            told.puback = rig.answered(sender, qos1_publish("a/1", 1), |p| {
                matches!(p, Packet::Puback(_))
            });
        }
        if told.puback {
            told.pubrec = rig.answered(sender, qos2_publish("q/1", 2), |p| {
                matches!(p, Packet::Pubrec(_))
            });
        }
        if told.pubrec {
            told.pubcomp = rig.answered(sender, pubrel(2), |p| matches!(p, Packet::Pubcomp(_)));
        }
        let finished = told.pubcomp && rig.wire.queue.is_empty();
        let case = format!("after {budget} writes, told {told:?}");

        let mut rig = Rig::new(rig.crash());
        // The sender resumes as MQTT has it: a PUBREL sent again where the
        // PUBREC came and the PUBCOMP did not, the PUBLISH again where the
        // PUBREC never came.
        let sender = rig.connect_as("sender", true, 3600);
        rig.settle();
        let present = rig.connack(sender).is_some_and(|c| c.session_present);
        if told.pubrec && !told.pubcomp {
            assert!(
                present,
                "{case}: the session that held the exchange is gone"
            );
            rig.packet(sender, pubrel(2));
        } else if told.puback && !told.pubrec && present {
            let mut again = qos2_publish("q/1", 2);
            if let Packet::Publish(p) = &mut again {
                p.dup = true;
            }
            rig.packet(sender, again);
            rig.settle();
            rig.packet(sender, pubrel(2));
        }
        rig.settle();
        let keeper = rig.connect_as("keeper", true, 3600);
        rig.settle();
        let got = received(&mut rig, keeper);
        let count = |topic: &str| got.iter().filter(|p| p.topic == topic).count();
        if told.puback {
            assert!(
                count("a/1") >= 1,
                "{case}: an acknowledged QoS 1 message was lost"
            );
        }
        assert!(
            count("q/1") <= 1,
            "{case}: a QoS 2 message delivered twice: {got:?}"
        );
        if told.pubrec {
            assert_eq!(
                count("q/1"),
                1,
                "{case}: a QoS 2 message owned by the broker was lost"
            );
        }
        if finished {
            break;
        }
        budget += 1;
        assert!(budget < 100, "the script never finished");
    }
    assert!(
        budget >= 4,
        "the script made too few writes to mean anything"
    );
}

#[test]
fn what_waits_on_a_session_write_is_bounded() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", true, 60);
    // Half of session_queue_bytes may wait; the client sending past it is
    // disconnected rather than buffered.
    let half = Settings::default().session_queue_bytes / 2;
    let count = half / 100_000 + 2;
    for _ in 0..count {
        let big = Packet::Publish(Publish {
            topic: "t".into(),
            payload: vec![0; 100_000],
            ..Publish::default()
        });
        rig.packet(conn, big);
    }
    assert!(rig.wire.closed.contains(&conn));
}

#[test]
fn a_refused_write_is_tried_once_more_as_the_broker_stops() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.connect_as("device", true, 60);
    rig.settle();
    rig.failing = true;
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.wire);
    rig.settle();
    rig.failing = false;
    rig.broker.shutdown(rig.now_ms, &mut rig.wire);
    rig.settle();
    assert_eq!(
        rig.stored_record("device").unwrap().disconnected_unix_ms,
        Some(START_UNIX_MS)
    );
}

/// One durable subscriber holding an old message unacknowledged keeps the
/// log's lowest cursor far back; another, away, is still owed what lies
/// near the head, and gets it after a restart: the start reads what each
/// cursor is owed, not only what follows the lowest.
#[test]
fn a_session_owed_messages_far_past_the_lowest_cursor_gets_them_after_a_restart() {
    let mut rig = Rig::new(empty_disk(64 << 20));
    let slow = rig.connect_as("slow", true, 3600);
    rig.packet(slow, subscribe("slow/#"));
    rig.away_subscriber("away", subscribe("b/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    // Sent to the slow subscriber, never acknowledged: its cursor stays.
    rig.packet(publisher, qos1_publish("slow/1", 1));
    rig.settle();
    assert_eq!(rig.publishes_to(slow).len(), 1);
    // Three times the start's old read bound of two sessions' queues.
    let payload_bytes = 100 * 1024;
    let count = 3 * 2 * (1 << 20) / payload_bytes;
    for i in 0..count {
        rig.packet(
            publisher,
            Packet::Publish(Publish {
                qos: QoS::AtLeastOnce,
                topic: format!("b/{i}"),
                packet_id: Some(2 + i as u16),
                payload: vec![b'p'; payload_bytes],
                ..Publish::default()
            }),
        );
        rig.settle();
    }
    let acknowledged = rig
        .take(publisher)
        .iter()
        .filter(|p| matches!(p, Packet::Puback(a) if a.reason_code == ReasonCode::SUCCESS))
        .count();
    assert_eq!(acknowledged, count + 1);
    rig.tick_to(200);

    let (mut rig, away) = rig.crash_and_resume("away");
    let mut topics = Vec::new();
    loop {
        let sent = rig.publishes_to(away);
        if sent.is_empty() {
            break;
        }
        for p in sent {
            topics.push(p.topic);
            let ack = crate::codec::PubAck {
                packet_id: p.packet_id.unwrap(),
                ..Default::default()
            };
            rig.packet(away, Packet::Puback(ack));
        }
        rig.settle();
    }
    assert!(
        topics.contains(&format!("b/{}", count - 1)),
        "the last message owed was not served: {topics:?}"
    );
}

/// A CONNECT the store refuses changes nothing of the session it named: a
/// Will waiting out its delay still falls due, and a session it would have
/// ended with its connection is still there to resume.
#[test]
fn a_connect_refused_for_a_failed_write_leaves_the_waiting_will_and_the_session_as_they_were() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let watcher = rig.watcher("wills/#");
    let conn = rig.open();
    let mut with_will = connect("device", true, 3600);
    with_will.will = Some(will(10));
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.settle();
    rig.broker
        .handle_connection_lost(conn, rig.now_ms, &mut rig.wire);
    rig.settle();
    rig.tick_to(2_000);
    rig.failing = true;
    for expiry_s in [3600, 0] {
        let again = rig.open();
        let mut resume = connect("device", true, expiry_s);
        resume.clean_start = false;
        rig.packet(again, Packet::Connect(Box::new(resume)));
        rig.settle();
        let connack = rig.connack(again).expect("answered");
        assert_eq!(
            connack.reason_code,
            ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR
        );
    }
    rig.failing = false;
    rig.tick_to(9_900);
    assert!(rig.publishes_to(watcher).is_empty(), "published early");
    rig.tick_to(10_000);
    assert_eq!(
        rig.publishes_to(watcher).len(),
        1,
        "the Will a refused CONNECT found waiting was lost"
    );
    let back = rig.connect_as("device", true, 3600);
    rig.settle();
    assert!(rig.connack(back).unwrap().session_present);
}

/// A delivery held for a window write the storage thread could not take
/// is still held when its session resumes on a new connection: it goes on
/// the wire once, after its window is stored, not sent from memory first.
#[test]
fn a_delivery_held_for_its_window_goes_once_after_it_when_the_session_resumes() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe("a/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.wire.busy = true;
    rig.settle();
    rig.broker
        .handle_connection_lost(keeper, rig.now_ms, &mut rig.wire);
    rig.wire.busy = false;
    let again = rig.connect_as("keeper", true, 3600);
    // Answered one storage request at a time: nothing is sent before the
    // window naming it is stored.
    let mut sent = Vec::new();
    while !rig.wire.queue.is_empty() {
        let windows_stored = rig
            .disk
            .entries(BROADCAST_SPACE)
            .unwrap()
            .iter()
            .filter(|(key, _)| key.starts_with("$window"))
            .count();
        let before = rig.publishes_to(again);
        assert!(
            before.is_empty() || windows_stored == 1,
            "sent before its window was stored (after {} requests): {before:?}",
            rig.applied
        );
        sent.extend(before);
        rig.budget = rig.applied + 1;
        rig.settle();
    }
    sent.extend(rig.publishes_to(again));
    let topics: Vec<_> = sent.iter().map(|p| p.topic.as_str()).collect();
    assert_eq!(topics, ["a/1"], "{sent:?}");
}

/// A DISCONNECT that leaves its delayed Will waiting stores it with the
/// user name its CONNECT carried, in the very write the close waits on.
#[test]
fn a_will_left_waiting_by_a_disconnect_is_stored_with_its_user_name() {
    assert_eq!(stored_will_user(None).as_deref(), Some("alice"));
}

/// On a connection a client certificate named, that name is the user the
/// Will is published as, whatever user name the CONNECT carried.
#[test]
fn a_certificate_name_is_the_user_name_over_the_connects() {
    assert_eq!(
        stored_will_user(Some("device-7")).as_deref(),
        Some("device-7")
    );
}

/// The user name stored with a Will left waiting by a DISCONNECT, from a
/// CONNECT carrying the user name `alice` on a connection whose client
/// certificate (if any) gave it `certificate_user`.
fn stored_will_user(certificate_user: Option<&str>) -> Option<String> {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let conn = rig.open();
    if let Some(name) = certificate_user {
        rig.broker.certified(conn, name.into());
    }
    let mut with_will = connect("device", true, 3600);
    with_will.will = Some(will(10));
    with_will.username = Some("alice".into());
    rig.packet(conn, Packet::Connect(Box::new(with_will)));
    rig.settle();
    rig.packet(
        conn,
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::DISCONNECT_WITH_WILL,
            properties: Properties::default(),
        }),
    );
    // Only the write the close waited on lands.
    rig.budget = rig.applied + 1;
    rig.settle();
    let stored = rig.stored_record("device").unwrap().will.unwrap();
    assert!(stored.due_unix_ms.is_some());
    stored.user_name
}

/// A shared group's first logged message finds the group's cursor stored
/// in the same commit, before its PUBACK: a crash at once still gives the
/// group its backlog back.
#[test]
fn a_durable_groups_first_acknowledged_message_survives_a_crash_before_any_cursor_commit() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let member = rig.connect_as("member", true, 3600);
    rig.packet(member, subscribe("$share/g/a/#"));
    rig.settle();
    rig.broker
        .handle_connection_lost(member, rig.now_ms, &mut rig.wire);
    rig.settle();
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.settle();
    assert!(rig
        .take(publisher)
        .iter()
        .any(|p| matches!(p, Packet::Puback(a) if a.reason_code == ReasonCode::SUCCESS)));
    // No ack_commit_interval has passed: nothing but the publish's own
    // commit is stored.
    let (mut rig, member) = rig.crash_and_resume("member");
    let topics: Vec<_> = rig
        .publishes_to(member)
        .into_iter()
        .map(|p| p.topic)
        .collect();
    assert_eq!(topics, ["a/1"]);
}

/// A cursor commit the store fails is written again at the next interval:
/// an acknowledged message is not sent again after a later crash.
#[test]
fn a_failed_cursor_commit_is_written_again_at_the_next_interval() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe("a/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.settle();
    let sent = rig.publishes_to(keeper);
    assert_eq!(sent.len(), 1);
    let ack = crate::codec::PubAck {
        packet_id: sent[0].packet_id.unwrap(),
        ..Default::default()
    };
    rig.packet(keeper, Packet::Puback(ack));
    rig.failing = true;
    rig.tick_to(200);
    rig.failing = false;
    rig.tick_to(400);
    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    assert!(
        rig.publishes_to(keeper).is_empty(),
        "an acknowledged message was sent again"
    );
}

/// A PUBREC whose window write the storage thread cannot take yet has its
/// PUBREL wait for the next interval, the subscriber's connection kept,
/// and the exchange resumes at that PUBREL after a crash.
#[test]
fn a_pubrel_waits_for_a_busy_storage_thread_and_keeps_the_connection() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe_qos2("q/#"));
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos2_publish("q/1", 1));
    rig.packet(publisher, pubrel(1));
    rig.settle();
    let sent = rig.publishes_to(keeper);
    assert_eq!(sent.len(), 1);
    let id = sent[0].packet_id.unwrap();
    rig.wire.busy = true;
    rig.packet(
        keeper,
        Packet::Pubrec(crate::codec::PubAck {
            packet_id: id,
            ..Default::default()
        }),
    );
    assert!(rig.take(keeper).is_empty(), "no PUBREL, and no DISCONNECT");
    assert!(!rig.wire.closed.contains(&keeper));
    rig.wire.busy = false;
    rig.tick_to(200);
    assert!(matches!(rig.take(keeper).as_slice(), [Packet::Pubrel(r)] if r.packet_id == id));

    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    let answers = rig.take(keeper);
    assert!(
        matches!(answers.as_slice(), [Packet::Connack(_), Packet::Pubrel(r)] if r.packet_id == id),
        "{answers:?}"
    );
}

/// The cursor and window of a session that ended while the store failed
/// are dropped at a later interval, and a new session of the same client
/// id is stored without them.
#[test]
fn an_ended_sessions_cursor_and_window_drops_are_written_again_until_they_land() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.connect_as("keeper", true, 1);
    rig.packet(keeper, subscribe("a/#"));
    rig.settle();
    rig.take(keeper);
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.settle();
    assert_eq!(
        rig.publishes_to(keeper).len(),
        1,
        "on the wire, never acknowledged"
    );
    rig.tick_to(200);
    let window = window_key("keeper");
    assert!(rig.disk.entry(BROADCAST_SPACE, &window).unwrap().is_some());
    rig.packet(keeper, clean_disconnect());
    rig.settle();
    // The session expires while every write fails.
    rig.failing = true;
    rig.tick_to(1_500);
    rig.failing = false;
    rig.tick_to(1_700);
    assert!(rig.stored_record("keeper").is_none());
    assert_eq!(rig.disk.entry(BROADCAST_SPACE, &window).unwrap(), None);
    assert_eq!(rig.disk.position(BROADCAST_SPACE, "keeper").unwrap(), None);
}

/// A new session's first record drops whatever cursor and window an
/// earlier session of its client id may have left, in the same commit.
#[test]
fn a_new_sessions_record_never_lands_beside_an_earlier_sessions_window() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.connect_as("keeper", true, 1);
    rig.packet(keeper, subscribe("a/#"));
    rig.settle();
    rig.take(keeper);
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.settle();
    rig.tick_to(200);
    rig.packet(keeper, clean_disconnect());
    rig.settle();
    rig.failing = true;
    rig.tick_to(1_300);
    rig.failing = false;
    // Before any interval retries the drops, the id connects again.
    let again = rig.connect_as("keeper", true, 3600);
    rig.settle();
    assert!(rig.connack(again).is_some());
    let disk = rig.crash();
    assert!(disk.entry(SESSIONS_SPACE, "keeper").unwrap().is_some());
    assert_eq!(
        disk.entry(BROADCAST_SPACE, &window_key("keeper")).unwrap(),
        None,
        "the new session's record landed beside the old session's window"
    );
}

/// A CONNECT that took a session over while an earlier CONNECT's write was
/// in flight keeps its own wait when the earlier write completes: a third
/// CONNECT still takes the session over from it.
#[test]
fn an_earlier_connects_write_does_not_release_a_newer_connects_wait() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let first = rig.connect_as("device", true, 3600);
    let second = rig.connect_as("device", true, 3600);
    assert!(rig.wire.closed.contains(&first));
    // Only the first CONNECT's write comes back.
    rig.budget = rig.applied + 1;
    rig.settle();
    rig.budget = usize::MAX;
    let third = rig.connect_as("device", true, 3600);
    rig.settle();
    assert!(
        rig.wire.closed.contains(&second),
        "two connections were given the same session"
    );
    assert!(rig.connack(third).is_some());
}

/// The cursor written ahead of a session's record is written again at the
/// next interval when the store fails it, though the record after it lands.
#[test]
fn a_failed_cursor_write_ahead_of_a_record_is_written_again_at_the_next_interval() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let keeper = rig.durable_subscriber("keeper", subscribe("a/#"));
    // A session that acknowledges nothing keeps the log from being trimmed
    // past what the keeper acknowledged.
    let other = rig.connect_as("other", true, 3600);
    rig.packet(other, subscribe("a/#"));
    rig.settle();
    let publisher = rig.connect_as("publisher", false, 0);
    rig.packet(publisher, qos1_publish("a/1", 1));
    rig.settle();
    let sent = rig.publishes_to(keeper);
    assert_eq!(sent.len(), 1);
    // Its cursor is stored while it is owed.
    rig.tick_to(200);
    let ack = crate::codec::PubAck {
        packet_id: sent[0].packet_id.unwrap(),
        ..Default::default()
    };
    rig.packet(keeper, Packet::Puback(ack));
    rig.settle();
    // The SUBSCRIBE's record goes behind the moved cursor; only the
    // cursor's commit fails.
    rig.packet(keeper, subscribe("b/#"));
    rig.failing = true;
    rig.budget = rig.applied + 1;
    rig.settle();
    rig.failing = false;
    rig.budget = usize::MAX;
    rig.settle();
    assert_eq!(rig.stored_record("keeper").unwrap().subscriptions.len(), 2);
    rig.tick_to(400);
    let (mut rig, keeper) = rig.crash_and_resume("keeper");
    assert!(
        rig.publishes_to(keeper).is_empty(),
        "an acknowledged message was sent again"
    );
}

/// A session kept under a longer `max_session_expiry` than the broker now
/// allows is held to the current limit from the start.
#[test]
fn a_restored_session_never_outlives_a_lowered_max_session_expiry() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    rig.away_subscriber("device", subscribe("a/#"));
    assert_eq!(rig.stored_record("device").unwrap().expiry_interval_s, 3600);
    let lowered = Settings {
        max_session_expiry_s: 10,
        ..settings(START_UNIX_MS + 60_000)
    };
    let mut rig = Rig::start_with(rig.crash(), lowered);
    assert!(
        rig.stored_record("device").is_none(),
        "the session outlived the limit"
    );
    let device = rig.connect_as("device", true, 3600);
    rig.settle();
    assert!(!rig.connack(device).unwrap().session_present);

    // One still within the lowered limit is kept with its expiry capped.
    let mut rig = Rig::new(empty_disk(1 << 20));
    let device = rig.connect_as("device", true, 3600);
    rig.packet(device, clean_disconnect());
    rig.settle();
    let lowered = Settings {
        max_session_expiry_s: 100,
        ..settings(START_UNIX_MS + 60_000)
    };
    let rig = Rig::start_with(rig.crash(), lowered);
    assert_eq!(rig.stored_record("device").unwrap().expiry_interval_s, 100);
}

/// An exactly-once release into a full log makes room as a QoS 1 append
/// does: the newest message is kept for the session away.
#[test]
fn a_full_log_gives_up_its_oldest_messages_for_a_released_qos2_one() {
    a_full_log_keeps_the_newest(QoS::ExactlyOnce);
}

/// Defect: a queue-form SUBSCRIBE was written to the session record before
/// its checks, so a crash could restore a worker the broker had refused.
/// A declaration's refusal is judged before the write too.
#[test]
fn a_refused_queue_form_or_slice_is_never_written_to_the_session_record() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    rig.durable_subscriber("worker", subscribe("$saguin/queue/nowhere"));
    let mut declared = subscribe("a/#");
    if let Packet::Subscribe(s) = &mut declared {
        s.properties
            .user_properties
            .push(("saguin-filter".into(), "topic_hash(3, 3)".into()));
    }
    rig.durable_subscriber("member", declared);
    for client_id in ["worker", "member"] {
        let record = rig
            .stored_record(client_id)
            .expect("a durable session's record");
        assert!(record.subscriptions.is_empty(), "{client_id}: {record:?}");
    }
}

/// A CONNECT refused because its session write failed leaves the session
/// it resumed with the grants of the name that session held, not those
/// compiled for the refused CONNECT's name (`nobody`, granted nothing):
/// what is published meanwhile is still owed to the session, and reaches
/// it when it resumes.
#[test]
fn a_connect_refused_for_a_failed_write_leaves_the_session_its_own_grants() {
    let mut rig = Rig::new(empty_disk(1 << 20));
    let acl = crate::core::tests::authorize_tests::acl(true);
    rig.broker.set_acl(Some(acl), rig.now_ms, &mut rig.wire);
    let connect_as_user = |rig: &mut Rig, user: &str, client_id: &str, durable: bool| {
        let conn = rig.open();
        let mut connect = connect(client_id, durable, if durable { 3600 } else { 0 });
        connect.clean_start = !durable;
        connect.username = Some(user.into());
        rig.packet(conn, Packet::Connect(Box::new(connect)));
        rig.settle();
        let answers = rig.take(conn);
        let code = answers.iter().find_map(|p| match p {
            Packet::Connack(c) => Some(c.reason_code),
            _ => None,
        });
        (conn, code.expect("answered"), answers)
    };
    let (device, code, _) = connect_as_user(&mut rig, "reader", "device", true);
    assert_eq!(code, ReasonCode::SUCCESS);
    rig.packet(device, subscribe("news/#"));
    rig.packet(device, clean_disconnect());
    rig.settle();

    rig.failing = true;
    let (_, code, _) = connect_as_user(&mut rig, "nobody", "device", true);
    assert_eq!(code, ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR);
    rig.failing = false;

    let (publisher, code, _) = connect_as_user(&mut rig, "quiet", "publisher", false);
    assert_eq!(code, ReasonCode::SUCCESS);
    rig.packet(publisher, qos1_publish("news/a", 1));
    rig.settle();
    let (_, code, answers) = connect_as_user(&mut rig, "reader", "device", true);
    assert_eq!(code, ReasonCode::SUCCESS);
    let topics: Vec<&str> = answers
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.topic.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        topics,
        ["news/a"],
        "the refused CONNECT's grants (none) stayed with the session"
    );
}
