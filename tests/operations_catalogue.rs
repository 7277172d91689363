//! The whole metrics catalogue in one scrape: every name the reference
//! catalogue defines is found by a Prometheus text parser nobody here
//! wrote (Python's `prometheus_client`), on a broker holding every kind
//! of channel, a redb provider and a bridge.

mod common;

use std::net::TcpListener;

use common::http::{get_body as get, sample};
use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, Publish, QoS};

/// Every name of the reference's catalogue but its Go runtime's.
const REFERENCE_CATALOGUE: &[&str] = &[
    // The broker.
    "saguin_build_info",
    "saguin_uptime_seconds",
    "saguin_connections",
    "saguin_connections_by_protocol",
    "saguin_connections_total",
    "saguin_sessions_offline",
    "saguin_wills_published_total",
    "saguin_wills_cancelled_total",
    "saguin_wills_waiting",
    "saguin_sessions_restored_total",
    "saguin_sessions_dropped_total",
    "saguin_session_queue_messages",
    "saguin_session_queue_bytes",
    "saguin_retained_messages",
    "saguin_qos2_held",
    "saguin_qos2_abandoned_total",
    "saguin_qos2_max_inflight_per_client",
    "saguin_subscriptions",
    "saguin_session_expiry_shortened_total",
    "saguin_max_session_expiry_seconds",
    // What the box moved.
    "saguin_bytes_received_total",
    "saguin_bytes_sent_total",
    "saguin_publishes_received_total",
    "saguin_deliveries_sent_total",
    "saguin_deliveries_refused_total",
    // Publishing.
    "saguin_published_total",
    "saguin_connections_refused_total",
    "saguin_publish_refused_total",
    "saguin_subscriptions_refused_total",
    "saguin_broadcast_unmatched_total",
    "saguin_deliveries_dropped_total",
    "saguin_deliveries_expired_total",
    "saguin_shares_held_total",
    "saguin_shares_drained_total",
    "saguin_shares_dropped_total",
    "saguin_session_deliveries_dropped_total",
    // Channels.
    "saguin_channel_info",
    "saguin_channel_records",
    "saguin_channel_bytes",
    "saguin_channel_next_offset",
    "saguin_channel_floor_offset",
    "saguin_channel_retention_removed_total",
    "saguin_channel_consumer_position_min",
    "saguin_channel_consumers",
    "saguin_channel_partitioned_consumers",
    "saguin_channel_position_lost_total",
    "saguin_latest_superseded_total",
    // Queues.
    "saguin_queue_depth",
    "saguin_queue_inflight",
    "saguin_queue_delivered_total",
    "saguin_queue_acknowledged_total",
    "saguin_queue_returned_total",
    "saguin_queue_redelivered_total",
    "saguin_queue_dead_lettered_total",
    "saguin_queue_expired_total",
    "saguin_queue_retain_ignored_total",
    // Storage.
    "saguin_provider_info",
    "saguin_provider_bytes",
    "saguin_provider_max_bytes",
    "saguin_storage_errors_total",
    "saguin_storage_commits_total",
    "saguin_storage_committed_records_total",
    "saguin_provider_publish_commit_max_records",
    // Bridges.
    "saguin_bridge_info",
    "saguin_bridge_connected",
    "saguin_bridge_stopped",
    "saguin_bridge_received_total",
    "saguin_bridge_unstored_total",
    "saguin_bridge_sent_total",
    "saguin_bridge_loops_skipped_total",
    "saguin_bridge_unsent_total",
    "saguin_bridge_reconnects_total",
];

/// Names the catalogue announces with no series until their cause
/// happens: a provider that never failed has no error series.
const NO_SERIES_UNTIL_IT_HAPPENS: &[&str] = &["saguin_storage_errors_total"];

/// The reference's Go runtime figures, which a Rust process has no
/// equivalent of, and the process figures published in their place
/// (rfcs/0011-operations.md).
const GO_RUNTIME: &[&str] = &[
    "saguin_go_heap_live_bytes",
    "saguin_go_heap_goal_bytes",
    "saguin_go_gc_cycles_total",
    "saguin_go_gc_cpu_seconds_total",
    "saguin_go_gc_assist_cpu_seconds_total",
    "saguin_go_stack_bytes",
    "saguin_go_allocated_bytes_total",
    "saguin_go_allocated_objects_total",
    "saguin_go_gogc_percent",
    "saguin_go_memory_limit_bytes",
];
const PROCESS: &[&str] = &[
    "saguin_process_resident_memory_bytes",
    "saguin_process_virtual_memory_bytes",
    "saguin_process_open_fds",
    "saguin_process_max_fds",
    "saguin_process_cpu_seconds_total",
    "saguin_process_start_time_seconds",
];

const STORAGE: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";

/// A port nothing listens on: the bridge dials it and stays down.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The sample names `prometheus_client` reads from `body`, or `None`
/// when the parser is not installed.
fn parsed_sample_names(body: &str) -> Option<Vec<String>> {
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as parse\nfor f in parse(sys.stdin.read()):\n    for s in f.samples:\n        print(s.name)\n";
    let names = common::http::prometheus_client(script, body)?;
    Some(names.lines().map(str::to_string).collect())
}

fn publish_qos1(topic: &str, packet_id: u16) -> Packet {
    Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(packet_id),
        payload: b"x".to_vec(),
        ..Publish::default()
    })
}

#[test]
fn every_name_of_the_reference_catalogue_is_in_a_scrape() {
    let dir = TempDir::new("ops-catalogue");
    let port = closed_port();
    let top = format!(
        "channels:\n  events:\n    type: append\n    filter: events/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\nbridges:\n  up:\n    peer: tcp://127.0.0.1:{port}\n    client_id: gw-1\n    topics:\n      - filter: events/#\n        direction: out\n        topic: events/$#\n"
    );
    let block =
        format!("{STORAGE}  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, &top);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let address = broker.address();
    // A durable consumer holds a position, so the lowest one has a series.
    let (mut consumer, _) = common::durable_connect(&address, "reader-1");
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    let mut client = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    common::publish_all(&mut client, "events/a", &[b"one".to_vec()]);
    // A refused publish and a refused filter give those families a series.
    client.send(&publish_qos1("$SYS/x", 9));
    assert!(
        matches!(client.recv(), Received::Packet(Packet::Puback(ack)) if ack.reason_code.0 == 0x87)
    );
    client.subscribe("$SYS/#", QoS::AtMostOnce);
    let mut refused = RawClient::open(&address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "scram-1");
    connect.properties.authentication_method = Some("SCRAM-SHA-1".into());
    refused.send(&Packet::Connect(Box::new(connect)));
    assert!(
        matches!(refused.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0x8C)
    );

    let body = get(&ops, "/metrics");
    let Some(samples) = parsed_sample_names(&body) else {
        return;
    };
    let missing: Vec<&str> = REFERENCE_CATALOGUE
        .iter()
        .chain(PROCESS)
        .copied()
        .filter(|name| !NO_SERIES_UNTIL_IT_HAPPENS.contains(name))
        .filter(|name| !samples.iter().any(|s| s == name))
        .collect();
    assert!(missing.is_empty(), "no series for {missing:?} in\n{body}");
    for name in NO_SERIES_UNTIL_IT_HAPPENS {
        assert!(
            body.contains(&format!("# TYPE {name} ")),
            "{name} is not announced"
        );
        assert!(!samples.iter().any(|s| s == name), "{name} has a series");
    }
    for name in GO_RUNTIME {
        assert!(!body.contains(name), "{name} is published");
    }
    // The labelled families carry what happened.
    assert!(body.contains("saguin_publish_refused_total{reason=\"not authorized\"} 1\n"));
    assert!(body.contains("saguin_subscriptions_refused_total{reason=\"not authorized\"} 1\n"));
    assert!(
        body.contains("saguin_connections_refused_total{reason=\"bad authentication method\"} 1\n")
    );
    assert!(body.contains(&format!(
        "saguin_bridge_info{{bridge=\"up\",peer=\"tcp://127.0.0.1:{port}\"}} 1\n"
    )));
    assert!(body.contains("saguin_bridge_connected{bridge=\"up\"} 0\n"));
    assert!(!body.contains("saguin_channel_bytes{channel=\"state\"}"));
    assert!(!body.contains("\nsaguin_bytes_received_total 0\n"));
}

#[test]
fn a_queues_work_is_counted_as_it_is_handed_out_and_answered() {
    let dir = TempDir::new("ops-queue-counts");
    let top = "channels:\n  jobs:\n    type: queue\n    filter: jobs/#\n";
    let block =
        format!("{STORAGE}  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, top);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    common::publish_all(&mut producer, "jobs/a", &[b"one".to_vec()]);
    // A retained publish into a queue is work, its flag dropped.
    let retained = Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "jobs/b".into(),
        packet_id: Some(77),
        payload: b"two".to_vec(),
        ..Publish::default()
    };
    producer.send(&Packet::Publish(retained));
    let acked = producer.recv();
    assert!(
        matches!(acked, Received::Packet(Packet::Puback(ref ack)) if ack.reason_code.0 == 0),
        "{acked:?}"
    );
    let mut worker = RawClient::connect(&address, ProtocolVersion::V5, "worker");
    let options = saguin::codec::SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..Default::default()
    };
    worker.send(&Packet::Subscribe(saguin::codec::Subscribe {
        packet_id: 5,
        properties: Default::default(),
        filters: vec![("$saguin/queue/jobs".into(), options)],
    }));
    match worker.recv() {
        Received::Packet(Packet::Suback(suback)) => assert_eq!(suback.reason_codes[0].0, 1),
        other => panic!("expected a SUBACK, got {other:?}"),
    }
    let mut early = Vec::new();
    let first = common::take_job(&mut worker, &mut early);
    common::answer_job(&mut worker, "jobs", &first, "return", &mut early);
    let second = common::take_job(&mut worker, &mut early);
    common::answer_job(&mut worker, "jobs", &second, "ack", &mut early);

    let body = get(&ops, "/metrics");
    let of = |name: &str| sample::<u64>(&body, &format!("{name}{{channel=\"jobs\"}}"));
    assert_eq!(of("saguin_queue_returned_total"), 1);
    assert_eq!(of("saguin_queue_acknowledged_total"), 1);
    assert_eq!(of("saguin_queue_retain_ignored_total"), 1);
    assert_eq!(of("saguin_queue_dead_lettered_total"), 0);
    // Every hand-over has ended in one of the four, or is out now.
    let ended = ["returned", "acknowledged", "redelivered", "dead_lettered"]
        .iter()
        .map(|n| of(&format!("saguin_queue_{n}_total")))
        .sum::<u64>();
    let delivered = of("saguin_queue_delivered_total");
    assert!(delivered >= 2);
    assert_eq!(delivered, ended + of("saguin_queue_inflight"));
    assert!(of("saguin_channel_bytes") > 0);
}
