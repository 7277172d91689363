//! Figure 12: what the operations listener costs. Broadcast QoS 1
//! throughput on a broker without the listener, and on one whose
//! `/metrics` is asked for every second through the run; and how long
//! one scrape takes with 1,000 clients connected and 100 channels.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use saguin::codec::ProtocolVersion;

use crate::brokers::{free_loopback_port, Broker, BrokerBinaries, BrokerKind, SaguinSetup};
use crate::client::{Client, ClientOptions};
use crate::load::{run_throughput, Throughput};

/// Clients connected while a scrape is timed, and channels configured.
pub const SCRAPE_CLIENTS: usize = 1_000;
pub const SCRAPE_CHANNELS: u32 = 100;

/// How often the scraper asks during a throughput run.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);
/// Longest a scrape may take before the run is called failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(30);

const IDLE: ClientOptions = ClientOptions {
    version: ProtocolVersion::V5,
    keep_alive_s: 600,
    receive_maximum: None,
};

/// One `GET /metrics`, read to its end; the response's length.
pub fn scrape(ops: SocketAddr) -> Result<usize, String> {
    get(ops, "/metrics").map(|response| response.len())
}

/// One `GET path` from the operations listener at `ops`, read to its end;
/// the whole response, head included, which must be a `200`.
pub fn get(ops: SocketAddr, path: &str) -> Result<Vec<u8>, String> {
    let mut stream = TcpStream::connect(ops).map_err(|e| format!("connect {ops}: {e}"))?;
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("read: {e}"))?;
    if !response.starts_with(b"HTTP/1.1 200 ") {
        let head = String::from_utf8_lossy(&response[..response.len().min(80)]).to_string();
        return Err(format!("{path} answered {head:?}"));
    }
    Ok(response)
}

/// The body of a `GET path`, as text.
pub fn get_body(ops: SocketAddr, path: &str) -> Result<String, String> {
    let response = get(ops, path)?;
    let text = String::from_utf8(response).map_err(|_| format!("{path}: not UTF-8"))?;
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .ok_or_else(|| format!("{path}: no end to the response head"))
}

/// One throughput run on a fresh saguin, with the operations listener
/// scraped every second when `scraped`.
pub fn throughput(
    binaries: &BrokerBinaries,
    load: &Throughput,
    run_label: &str,
    scraped: bool,
) -> Result<f64, String> {
    let (setup, ops) = match scraped {
        // The bench's brokers log at `warn`, so the door's address is
        // chosen here rather than read back from the log.
        true => {
            let port = free_loopback_port()?;
            let setup = SaguinSetup::Operations { port, channels: 0 };
            (setup, Some(SocketAddr::from(([127, 0, 0, 1], port))))
        }
        false => (SaguinSetup::Plain, None),
    };
    let broker = Broker::start_with(BrokerKind::Saguin, binaries, setup)?;
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = ops.map(|ops| {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<u64, String> {
            let mut scrapes = 0;
            while !stop.load(Ordering::Relaxed) {
                scrape(ops)?;
                scrapes += 1;
                std::thread::sleep(SCRAPE_EVERY);
            }
            Ok(scrapes)
        })
    });
    let outcome = run_throughput(&broker.endpoint(), load, run_label);
    stop.store(true, Ordering::Relaxed);
    let scraped = scraper.map(|s| {
        s.join()
            .unwrap_or_else(|_| Err("the scraper panicked".into()))
    });
    broker.stop();
    if let Some(failure) = outcome.failure.clone() {
        return Err(failure);
    }
    if let Some(Err(failure)) = scraped {
        return Err(format!("scraping: {failure}"));
    }
    Ok(outcome.delivered_per_s())
}

/// How long the first scrape takes - the one the broker computes rather
/// than answers from its cache - with [`SCRAPE_CLIENTS`] clients connected
/// and [`SCRAPE_CHANNELS`] channels configured.
pub fn scrape_time(binaries: &BrokerBinaries, run_label: &str) -> Result<Duration, String> {
    let port = free_loopback_port()?;
    let setup = SaguinSetup::Operations {
        port,
        channels: SCRAPE_CHANNELS,
    };
    let broker = Broker::start_with(BrokerKind::Saguin, binaries, setup)?;
    let clients: Result<Vec<Client>, String> = (0..SCRAPE_CLIENTS)
        .map(|i| Client::connect(broker.address, &format!("{run_label}-idle-{i}"), &IDLE))
        .collect();
    let result = clients.and_then(|clients| {
        let started = Instant::now();
        let scraped = scrape(SocketAddr::from(([127, 0, 0, 1], port)));
        let elapsed = started.elapsed();
        drop(clients);
        scraped.map(|_| elapsed)
    });
    broker.stop();
    result
}
