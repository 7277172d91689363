//! The status page in headless Chromium (Debian's, over its DevTools
//! protocol: `common::chromium`), against a broker holding an append
//! channel with a durable consumer behind, a latest channel, a queue
//! with a job leased, one waiting and a dead letter, and a bridge to a
//! real mosquitto that is stopped halfway. The page must show each number
//! as the routes report it, and go on redrawing: once mosquitto is down,
//! the records published stay in the bridge's backlog and the consumer
//! falls further behind, and the page shows both.
//!
//! `SAGUIN_STATUS_SCREENSHOT=<file>` writes what the page looks like at
//! the end as PNG, once the next scrape (a minute on) shows the link
//! down: the README's picture, docs/status-page.png.

mod common;

use common::chromium::{have_chromium, Chromium};
use common::http::{get_body as get, sample};
use common::mosquitto::{have_mosquitto, Mosquitto};
use common::{free_port, BrokerProcess, RawClient, Received, TempDir, WAIT};
use saguin::codec::{Packet, ProtocolVersion, Publish, QoS, Subscribe, SubscriptionOptions};

const BROKER: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n        device_endurance: 29TBW\n  session:\n    storage: local\n  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n";

fn top(port: u16) -> String {
    format!("channels:\n  events:\n    type: append\n    filter: events/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\n    retry:\n      max_attempts: 1\nbridges:\n  up:\n    peer: tcp://127.0.0.1:{port}\n    client_id: gw-1\n    topics:\n      - filter: events/#\n        direction: out\n        topic: site/$#\n")
}

/// A number a JSON body gives after `"key":` (the first, after `from`).
fn json_number(body: &str, from: &str, key: &str) -> String {
    let at = body
        .find(from)
        .unwrap_or_else(|| panic!("no {from} in {body}"));
    let rest = &body[at..];
    let start = rest.find(&format!("\"{key}\":")).unwrap() + key.len() + 3;
    rest[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

/// What the page shows for `key`, its digit groups joined.
fn shown(key: &str) -> String {
    format!("(document.querySelector('[data-k=\"{key}\"]')?.textContent ?? 'absent').replaceAll('\\u202f', '')")
}

fn title(key: &str) -> String {
    format!("document.querySelector('[data-k=\"{key}\"]')?.title ?? 'absent'")
}

fn publish(client: &mut RawClient, topic: &str, payload: &[u8]) {
    let acknowledged = common::publish_all(client, topic, &[payload.to_vec()]);
    assert_eq!(acknowledged.len(), 1);
}

#[test]
fn the_status_page_shows_what_the_routes_report_and_keeps_redrawing() {
    let test = "the_status_page_shows_what_the_routes_report_and_keeps_redrawing";
    if !have_chromium(test) || !have_mosquitto(test) {
        return;
    }
    let peer_dir = TempDir::new("status-mosquitto");
    let port = free_port();
    let peer = Mosquitto::start(
        peer_dir.path(),
        &format!("allow_anonymous true\nlistener {port} 127.0.0.1\n"),
        port,
    );
    let dir = TempDir::new("status-page");
    let mut broker = BrokerProcess::start_in(dir.path(), BROKER, &top(port));
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    broker.wait_for_log("bridge up: link to");
    let address = broker.address();

    // A durable consumer that read nothing and went away: behind by all.
    let (mut reader, _) = common::durable_connect(&address, "reader-1");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    reader.send(&Packet::Disconnect(Default::default()));
    drop(reader);
    let mut device = RawClient::connect(&address, ProtocolVersion::V5, "device-7");
    let readings: Vec<Vec<u8>> = (0..30).map(|i| format!("{i}").into_bytes()).collect();
    assert_eq!(
        common::publish_all(&mut device, "events/a", &readings).len(),
        30
    );
    publish(&mut device, "state/boiler", b"on");
    // A publish refused, so refusals have a reason to show.
    device.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: "$SYS/x".into(),
        packet_id: Some(900),
        payload: b"x".to_vec(),
        ..Publish::default()
    }));
    assert!(
        matches!(device.recv(), Received::Packet(Packet::Puback(a)) if a.reason_code.0 == 0x87)
    );

    // Three jobs: one returned on its only attempt (a dead letter), one
    // leased to the worker, one waiting.
    let jobs: Vec<Vec<u8>> = (0..3).map(|i| format!("job {i}").into_bytes()).collect();
    assert_eq!(common::publish_all(&mut device, "jobs/a", &jobs).len(), 3);
    let mut worker = RawClient::connect(&address, ProtocolVersion::V5, "worker-1");
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..Default::default()
    };
    worker.send(&Packet::Subscribe(Subscribe {
        packet_id: 5,
        properties: Default::default(),
        filters: vec![("$saguin/queue/jobs".into(), options)],
    }));
    assert!(matches!(worker.recv(), Received::Packet(Packet::Suback(_))));
    let mut early = Vec::new();
    let first = common::take_job(&mut worker, &mut early);
    common::answer_job(&mut worker, "jobs", &first, "return", &mut early);
    common::take_job(&mut worker, &mut early);

    // Every record crossed the bridge before the page is opened.
    let bridge_behind = |ops: &str| {
        let body = get(ops, "/v1/operations/consumers");
        body.contains("bridge:up/")
            .then(|| json_number(&body, "bridge:up/", "behind"))
    };
    let deadline = std::time::Instant::now() + WAIT;
    while bridge_behind(&ops).as_deref() != Some("0") {
        assert!(
            std::time::Instant::now() < deadline,
            "the bridge did not catch up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // The return's dead letter is stored after the next job is handed out,
    // and /metrics is computed once a minute: the first scrape must come
    // after the move, or the page and this test read a minute-old figure.
    broker.wait_for_log("job 1 of jobs is dead-lettered");

    // The scrape the page reads: computed now, answered again inside the
    // interval.
    let metrics = get(&ops, "/metrics");
    let consumers = get(&ops, "/v1/operations/consumers");
    let queue = get(&ops, "/v1/operations/queues/jobs");
    let sessions = get(&ops, "/v1/operations/sessions");
    let mut page = Chromium::open(&format!("http://{ops}/"), 1280, 1500);
    page.wait_for("document.title", "Sagüin");
    page.wait_for(&shown("broker/id"), "test");
    page.wait_for(&shown("health"), "ok");

    let channel = |key: &str| format!("channel/events/{key}");
    for (key, series) in [
        (
            channel("records"),
            "saguin_channel_records{channel=\"events\"}",
        ),
        (
            channel("floor"),
            "saguin_channel_floor_offset{channel=\"events\"}",
        ),
        (
            channel("next"),
            "saguin_channel_next_offset{channel=\"events\"}",
        ),
        (
            channel("consumers"),
            "saguin_channel_consumers{channel=\"events\"}",
        ),
        (
            "channel/state/records".into(),
            "saguin_channel_records{channel=\"state\"}",
        ),
        (
            "queue/jobs/depth".into(),
            "saguin_queue_depth{channel=\"jobs\"}",
        ),
        (
            "queue/jobs/leased".into(),
            "saguin_queue_inflight{channel=\"jobs\"}",
        ),
        (
            "queue/jobs/dead_lettered".into(),
            "saguin_queue_dead_lettered_total{channel=\"jobs\"}",
        ),
        (
            "queue/jobs/dead_letters".into(),
            "saguin_channel_records{channel=\"jobs__dlq\"}",
        ),
        (
            "bridge/up/sent".into(),
            "saguin_bridge_sent_total{bridge=\"up\"}",
        ),
        (
            "listener/tcp/connections".into(),
            "saguin_connections_by_listener{listener=\"tcp\"}",
        ),
        (
            "refused/publish/not authorized".into(),
            "saguin_publish_refused_total{reason=\"not authorized\"}",
        ),
    ] {
        page.wait_for(&shown(&key), &sample::<String>(&metrics, series));
    }
    // The numbers the test set up, so the comparison above is of something.
    assert_eq!(
        sample::<String>(&metrics, "saguin_queue_depth{channel=\"jobs\"}"),
        "2"
    );
    assert_eq!(
        sample::<String>(&metrics, "saguin_queue_inflight{channel=\"jobs\"}"),
        "1"
    );
    assert_eq!(
        sample::<String>(&metrics, "saguin_channel_records{channel=\"jobs__dlq\"}"),
        "1"
    );
    assert_eq!(
        sample::<String>(&metrics, "saguin_channel_records{channel=\"events\"}"),
        "30"
    );
    for (key, series) in [
        (
            "provider/local/bytes",
            "saguin_provider_bytes{provider=\"local\"}",
        ),
        (
            "provider/local/max_bytes",
            "saguin_provider_max_bytes{provider=\"local\"}",
        ),
        (
            "provider/local/endurance",
            "saguin_provider_device_endurance_bytes{provider=\"local\"}",
        ),
    ] {
        page.wait_for(
            &title(key),
            &format!("{} bytes", sample::<String>(&metrics, series)),
        );
    }
    page.wait_for(&shown("bridge/up/link"), "up");
    page.wait_for(&shown("bridge/up/backlog"), "0");
    let behind = json_number(&consumers, "mqtt:reader-1", "behind");
    assert_eq!(behind, "30");
    page.wait_for(&shown("consumer/events/mqtt:reader-1/behind"), &behind);
    page.wait_for(&shown("channel/events/behind"), &behind);
    page.wait_for(
        &shown("queue/jobs/unresolved"),
        &json_number(&queue, "{", "unresolved"),
    );
    page.wait_for(
        &shown("sessions/total"),
        &json_number(&sessions, "\"total\"", "total"),
    );
    page.wait_for(
        &shown("sessions/offline"),
        &json_number(&sessions, "\"offline\"", "offline"),
    );

    // Halfway: the uplink goes, and what is published waits for it.
    peer.stop();
    broker.wait_for_log(" down (");
    let more: Vec<Vec<u8>> = (30..50).map(|i| format!("{i}").into_bytes()).collect();
    assert_eq!(
        common::publish_all(&mut device, "events/a", &more).len(),
        20
    );
    let consumers = get(&ops, "/v1/operations/consumers");
    assert_eq!(json_number(&consumers, "mqtt:reader-1", "behind"), "50");
    assert_eq!(json_number(&consumers, "bridge:up/", "behind"), "20");
    page.wait_for(&shown("consumer/events/mqtt:reader-1/behind"), "50");
    page.wait_for(&shown("bridge/up/backlog"), "20");
    let drain = page.evaluate(&shown("bridge/up/drain"));
    assert!(
        drain.starts_with('-'),
        "a growing backlog drains below 0: {drain}"
    );

    if let Ok(path) = std::env::var("SAGUIN_STATUS_SCREENSHOT") {
        // The picture waits for the next scrape, which says the link is down.
        let next_scrape = std::time::Duration::from_secs(90);
        page.wait_for_within(&shown("bridge/up/link"), "down", next_scrape);
        std::fs::write(&path, page.screenshot_png()).unwrap();
    } else {
        assert!(page.screenshot_png().starts_with(b"\x89PNG\r\n\x1a\n"));
    }
}
