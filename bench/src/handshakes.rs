//! Connections a broker takes in a second: each a new TCP connection (and
//! a full TLS handshake where the endpoint has TLS), CONNECT and CONNACK,
//! then DISCONNECT, from a few threads each connecting one after another.

use std::thread;
use std::time::Instant;

use saguin::codec::ProtocolVersion;

use crate::client::{Client, ClientOptions, Endpoint};

/// Threads connecting at once.
pub const THREADS: usize = 4;

const OPTIONS: ClientOptions = ClientOptions {
    version: ProtocolVersion::V311,
    keep_alive_s: 60,
    receive_maximum: None,
};

/// Makes `count` connections, rounded down to a multiple of `THREADS`;
/// returns connections per second from the first start to the last
/// CONNACK.
pub fn rate(endpoint: &Endpoint, count: usize, run_label: &str) -> Result<f64, String> {
    let each = count / THREADS;
    let started = Instant::now();
    thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    for i in 0..each {
                        let id = format!("{run_label}-h{t}-{i}");
                        Client::connect_to(endpoint, &id, &OPTIONS)?.disconnect();
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .unwrap_or_else(|_| Err("a connecting thread panicked".into()))
        })
    })?;
    Ok((each * THREADS) as f64 / started.elapsed().as_secs_f64())
}
