//! Stock clients through the real broker: what `mosquitto_pub` publishes,
//! `mosquitto_sub` receives, all of it and in order, on both protocols.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{have_mosquitto_clients, BrokerProcess, WAIT};

const MESSAGES: usize = 200;

struct Subscriber {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The options both mosquitto clients take: where, which MQTT, which QoS
/// and topic.
fn client_args(port: u16, version: &str, qos: u8, topic: &str) -> Vec<String> {
    [
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-V",
        version,
        "-q",
        &qos.to_string(),
        "-t",
        topic,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

fn subscribe(port: u16, version: &str, qos: u8, topic: &str) -> Subscriber {
    let mut child = Command::new("mosquitto_sub")
        .args(client_args(port, version, qos, topic))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mosquitto_sub");
    let stdout = child.stdout.take().unwrap();
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    Subscriber { child, lines }
}

fn publish(port: u16, version: &str, qos: u8, topic: &str, payloads: &[String]) {
    let mut child = Command::new("mosquitto_pub")
        .args(client_args(port, version, qos, topic))
        .arg("-l")
        .stdin(Stdio::piped())
        .spawn()
        .expect("start mosquitto_pub");
    let mut stdin = child.stdin.take().unwrap();
    for payload in payloads {
        writeln!(stdin, "{payload}").unwrap();
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "mosquitto_pub failed: {status}");
}

/// Publishes a marker until the subscriber shows it, so that the real
/// messages are published only once the subscription is in place.
fn wait_until_subscribed(port: u16, version: &str, topic: &str, subscriber: &Subscriber) {
    let deadline = Instant::now() + WAIT;
    loop {
        publish(port, version, 0, topic, &["ready".to_string()]);
        if let Ok(line) = subscriber.lines.recv_timeout(Duration::from_millis(200)) {
            assert_eq!(line, "ready");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "mosquitto_sub never received the marker"
        );
    }
}

fn in_order(version: &str, qos: u8) {
    if !have_mosquitto_clients(&format!("mosquitto_clients V{version} QoS {qos}")) {
        return;
    }
    let broker = BrokerProcess::start("");
    let topic = format!("gateway/order/v{version}/q{qos}");
    let subscriber = subscribe(broker.port, version, qos, &topic);
    wait_until_subscribed(broker.port, version, &topic, &subscriber);

    let payloads: Vec<String> = (0..MESSAGES).map(|i| format!("message-{i:04}")).collect();
    publish(broker.port, version, qos, &topic, &payloads);

    let mut received = Vec::new();
    let deadline = Instant::now() + WAIT;
    while received.len() < MESSAGES {
        let left = deadline.saturating_duration_since(Instant::now());
        match subscriber.lines.recv_timeout(left) {
            Ok(line) if line == "ready" => {}
            Ok(line) => received.push(line),
            Err(_) => panic!(
                "received {} of {MESSAGES} messages: {received:?}",
                received.len()
            ),
        }
    }
    assert_eq!(
        received, payloads,
        "every message, in the order it was published"
    );
}

#[test]
fn mqtt5_qos0() {
    in_order("5", 0);
}

#[test]
fn mqtt5_qos1() {
    in_order("5", 1);
}

#[test]
fn mqtt311_qos0() {
    in_order("311", 0);
}

#[test]
fn mqtt311_qos1() {
    in_order("311", 1);
}

#[test]
fn mqtt5_qos2() {
    in_order("5", 2);
}

#[test]
fn mqtt311_qos2() {
    in_order("311", 2);
}
