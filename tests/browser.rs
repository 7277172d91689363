//! MQTT.js (the `mqtt` npm package) in headless Chromium, against a `ws`
//! door: a page served here connects, subscribes, receives a retained
//! value and publishes, and reports each step back to the test over HTTP.
//!
//! Needs Debian's `chromium` and `npm ci` run in `tests/browser` (both of
//! which `.ci/run` does); says SKIPPED without them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Instant;

use common::chromium::{have_chromium, Chromium};
use common::{BrokerProcess, RawClient, Received, WAIT};
use saguin::codec::{Packet, ProtocolVersion, Publish, QoS};

fn mqtt_js() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/node_modules/mqtt/dist/mqtt.min.js")
}

/// Whether the browser and the library are here; says loudly when not.
fn have_browser_and_library(test: &str) -> bool {
    if !have_chromium(test) {
        return false;
    }
    let found = mqtt_js().exists();
    if !found {
        let why = "MQTT.js is not installed (npm ci in tests/browser)";
        let _ =
            std::io::stderr().write_all(format!("\n*** SKIPPED {test}: {why} ***\n").as_bytes());
    }
    found
}

/// The page: MQTT.js from this server, connecting to the door at
/// `ws_port`, and every step reported to `/report`.
fn page(ws_port: u16) -> String {
    format!(
        r#"<!doctype html>
<html><head><title>dashboard</title><script src="/mqtt.min.js"></script></head>
<body><script>
const report = (text) => fetch("/report", {{ method: "POST", body: text }});
try {{
  const client = mqtt.connect("ws://127.0.0.1:{ws_port}/mqtt", {{
    clientId: "browser-dashboard", protocolVersion: 5, reconnectPeriod: 0
  }});
  client.on("error", (e) => report("error " + e.message));
  client.on("connect", () => {{
    report("connected");
    client.subscribe("dashboard/#", {{ qos: 1 }}, (e) => report(e ? "subscribe error " + e.message : "subscribed"));
  }});
  client.on("message", (topic, payload, packet) => {{
    if (topic !== "dashboard/temperature") return;
    report("received " + topic + " " + payload.toString() + " retain=" + packet.retain);
    client.publish("dashboard/command", "heat on", {{ qos: 1 }}, (e) => report(e ? "publish error " + e.message : "published"));
  }});
}} catch (e) {{
  report("exception " + e);
}}
</script></body></html>"#
    )
}

/// Serves the page and the library, and forwards each report.
fn serve(listener: TcpListener, page: String, reports: Sender<String>) {
    let library = std::fs::read(mqtt_js()).unwrap();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let _ = answer(stream, &page, &library, &reports);
    }
}

fn answer(
    stream: TcpStream,
    page: &str,
    library: &[u8],
    reports: &Sender<String>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let path = request_line.split(' ').nth(1).unwrap_or("");
    let (status, kind, content): (&str, &str, &[u8]) = match path {
        "/" => ("200 OK", "text/html", page.as_bytes()),
        "/mqtt.min.js" => ("200 OK", "application/javascript", library),
        "/report" => {
            let _ = reports.send(String::from_utf8_lossy(&body).into_owned());
            ("200 OK", "text/plain", b"")
        }
        _ => ("404 Not Found", "text/plain", b""),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        content.len()
    )?;
    stream.write_all(content)
}

/// Reports until one contains `wanted`; fails on an error report.
fn wait_for_report(reports: &Receiver<String>, wanted: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + WAIT;
    while !seen.iter().any(|r| r.contains(wanted)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match reports.recv_timeout(left) {
            Ok(report) => {
                assert!(
                    !report.contains("error") && !report.contains("exception"),
                    "the page says: {report}"
                );
                seen.push(report);
            }
            Err(_) => panic!("the page did not report {wanted:?}; it reported {seen:?}"),
        }
    }
}

#[test]
fn mqtt_js_in_chromium_connects_over_ws_receives_a_retained_value_and_publishes() {
    let test = "mqtt_js_in_chromium_connects_over_ws_receives_a_retained_value_and_publishes";
    if !have_browser_and_library(test) {
        return;
    }
    let site = TcpListener::bind("127.0.0.1:0").unwrap();
    let site_port = site.local_addr().unwrap().port();
    // The page comes from another port than the door's, so it is another
    // site: listed, and same_origin off.
    let door = format!(
        "      ws:\n        address: 127.0.0.1:0\n        same_origin: false\n        allowed_origins: [\"http://127.0.0.1:{site_port}\"]\n"
    );
    let mut broker = BrokerProcess::start(&door);
    let ws_port = broker.door_port("ws");
    let mut device = RawClient::connect(&broker.address(), ProtocolVersion::V5, "thermometer");
    device.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "dashboard/temperature".into(),
        packet_id: Some(1),
        payload: b"21.5".to_vec(),
        ..Publish::default()
    }));
    assert!(matches!(device.recv(), Received::Packet(Packet::Puback(_))));
    device.subscribe("dashboard/command", QoS::AtLeastOnce);

    let (reports, reported) = mpsc::channel();
    let html = page(ws_port);
    std::thread::spawn(move || serve(site, html, reports));
    let _browser = Chromium::open(&format!("http://127.0.0.1:{site_port}/"), 800, 600);

    let mut seen = Vec::new();
    wait_for_report(&reported, "subscribed", &mut seen);
    wait_for_report(
        &reported,
        "received dashboard/temperature 21.5 retain=true",
        &mut seen,
    );
    wait_for_report(&reported, "published", &mut seen);
    match device.recv() {
        Received::Packet(Packet::Publish(p)) => {
            assert_eq!(
                (p.topic.as_str(), p.payload.as_slice()),
                ("dashboard/command", &b"heat on"[..])
            )
        }
        other => panic!("expected the page's publish, got {other:?}"),
    }
    broker.wait_for_log("client browser-dashboard connected");
}
