//! What each kind of door does with a socket it accepted before MQTT is
//! read from it: a TLS door shakes hands, a `ws` door answers the
//! WebSocket upgrade (after TLS on a `wss` one), a Unix door with
//! `proxy_protocol` reads the PROXY v2 header, and a plain TCP or Unix door
//! does nothing. Each opening runs in the connection's slot, bounded as a
//! CONNECT is.

use std::cell::Cell;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use smol::Async;

use super::socket::{Duplex, Learnt, Opened, Opening, Socket};
use super::websocket::handshake::{self, Answer};
use super::websocket::{Origins, WsStream};
use super::{tls, SharedRef};
use crate::core::Key;
use crate::ops::proxy;
use crate::ops::route::Certified;

/// A socket as a door's listener gave it.
pub enum Accepted {
    Tcp(Async<TcpStream>),
    Unix(Async<UnixStream>),
}

impl Accepted {
    /// The socket as a byte stream, whatever its kind.
    pub fn into_stream(self) -> Box<dyn Duplex> {
        match self {
            Accepted::Tcp(stream) => Box::new(stream),
            Accepted::Unix(stream) => Box::new(stream),
        }
    }
}

/// What a door does with each socket, as it stands when one arrives.
pub struct Plan {
    /// What messages call the door: `broker.mqtt.listen.ws[dashboard]`.
    pub door: Rc<str>,
    /// The TLS configuration in force, for a TLS door.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// A `ws` door's rule for web pages.
    pub websocket: Option<Rc<Origins>>,
    /// A Unix door behind a proxy.
    pub proxy_protocol: bool,
    /// A WebSocket frame longer than this is refused: `max_message_size`.
    pub max_frame_bytes: u64,
}

/// How long a refused upgrade's answer may take to be written.
const REFUSAL_WRITE_MS: u64 = 1_000;
/// The most of a refused page's origin a log line carries.
const LOGGED_ORIGIN_CHARS: usize = 128;

/// The socket connection `key` runs over, its opening (if any) to come.
pub fn socket(shared: &SharedRef, key: Key, accepted: Accepted, plan: Plan) -> Socket {
    match accepted {
        Accepted::Tcp(stream) => {
            if plan.tls.is_none() && plan.websocket.is_none() {
                return Socket::Plain(stream);
            }
            let peer = stream
                .get_ref()
                .peer_addr()
                .map_or_else(|_| "a client".to_string(), |a| a.to_string());
            let shared = shared.clone();
            let door = plan.door.clone();
            Socket::opening(Opening::new(door, peer.clone(), move |stage| {
                open_tcp(
                    stream,
                    plan,
                    Told {
                        shared,
                        key,
                        peer,
                        stage,
                    },
                )
            }))
        }
        Accepted::Unix(stream) if plan.proxy_protocol => {
            let door = plan.door.clone();
            Socket::opening(Opening::new(door.clone(), "a proxy".into(), move |stage| {
                stage.set("the PROXY header");
                read_proxy_header(stream, door)
            }))
        }
        Accepted::Unix(stream) => Socket::open(Box::new(stream)),
    }
}

/// Who the opening reports to, and where it says it has got to.
struct Told {
    shared: SharedRef,
    key: Key,
    peer: String,
    stage: Rc<Cell<&'static str>>,
}

async fn open_tcp(stream: Async<TcpStream>, plan: Plan, told: Told) -> Option<Opened> {
    let Some(config) = plan.tls.clone() else {
        return upgrade(Box::new(stream), &plan, &told, Learnt::default()).await;
    };
    told.stage.set("TLS handshake");
    let accept = futures_rustls::TlsAcceptor::from(config)
        .accept(stream)
        .into_fallible();
    let secured = match accept.await {
        Ok(secured) => secured,
        Err((error, stream)) => {
            let hint = tls::handshake_hint(&error);
            log::info!(
                "{}: TLS handshake with {} failed: {error}{hint}",
                plan.door,
                told.peer
            );
            stream.shutdown();
            return None;
        }
    };
    let mut learnt = Learnt::default();
    if let Some(certificate) = tls::client_certificate(secured.get_ref().1) {
        match certificate.name() {
            Some(name) => learnt.certified = Some(name.into()),
            None => log::warn!(
                "{}: the client certificate {} presented was verified but carries neither a Common Name nor a DNS name; it names nobody, so the client is taken as one without a certificate",
                plan.door,
                told.peer
            ),
        }
    }
    if plan.websocket.is_none() {
        return Some(Opened {
            stream: Box::new(secured),
            learnt,
        });
    }
    upgrade(Box::new(secured), &plan, &told, learnt).await
}

/// Answers a `ws` door's upgrade request over `stream`: the stream framed,
/// or `None` once a refusal has been answered and logged. One copy of it
/// and of the framing serves plain and TLS doors, and bridges too.
async fn upgrade(
    mut stream: Box<dyn Duplex>,
    plan: &Plan,
    told: &Told,
    learnt: Learnt,
) -> Option<Opened> {
    let Some(origins) = &plan.websocket else {
        return Some(Opened { stream, learnt });
    };
    told.stage.set("WebSocket upgrade");
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                log::debug!("{}: {} left before its upgrade", plan.door, told.peer);
                return None;
            }
            Ok(n) => n,
        };
        head.extend_from_slice(&chunk[..n]);
        match handshake::answer(&head, origins, plan.tls.is_some()) {
            Answer::Incomplete => continue,
            Answer::Upgrade {
                response,
                head_bytes,
            } => {
                if stream.write_all(&response).await.is_err() || stream.flush().await.is_err() {
                    return None;
                }
                let early = head.split_off(head_bytes);
                let framed = WsStream::server(stream, early, plan.max_frame_bytes);
                return Some(Opened {
                    stream: Box::new(framed),
                    learnt,
                });
            }
            Answer::Refuse {
                status,
                response,
                why,
                origin,
            } => {
                // The slot goes back before the answer is written: this is
                // no MQTT connection, and the client may try again at once.
                release(&told.shared, told.key);
                match origin {
                    Some(origin) => {
                        let origin: String = origin.chars().take(LOGGED_ORIGIN_CHARS).collect();
                        log::warn!(
                            "{}: refused a WebSocket upgrade from {} with {status}: origin {origin:?}: {why}",
                            plan.door,
                            told.peer
                        );
                    }
                    None => log::info!(
                        "{}: refused a WebSocket upgrade from {} with {status}: {why}",
                        plan.door,
                        told.peer
                    ),
                }
                answer_and_close(&mut stream, &response).await;
                return None;
            }
        }
    }
}

/// Gives connection `key`'s slot back to the core while its socket still
/// has an answer to write.
fn release(shared: &SharedRef, key: Key) {
    let mut guard = shared.borrow_mut();
    let state = &mut *guard;
    let now_ms = state.now_ms();
    // Out of the table first, so the core's goodbye finds no outbox to mark.
    state.outboxes.remove(key);
    state
        .broker
        .handle_connection_lost(key, now_ms, &mut state.outboxes);
}

/// Writes a final answer and closes, then lingers as the operations
/// listener's refusals do (`ops::http::linger`).
async fn answer_and_close<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, response: &[u8]) {
    let written =
        async { stream.write_all(response).await.is_ok() && stream.close().await.is_ok() };
    let timeout = async {
        smol::Timer::after(Duration::from_millis(REFUSAL_WRITE_MS)).await;
        false
    };
    if smol::future::or(written, timeout).await {
        crate::ops::http::linger(stream).await;
    }
}

/// Reads the PROXY v2 header a `proxy_protocol` door's connection starts
/// with: who the client is, and the name of a certificate the proxy
/// verified. A connection without a sound v2 header is refused, logged.
async fn read_proxy_header(mut stream: Async<UnixStream>, door: Rc<str>) -> Option<Opened> {
    let header = match proxy::read_header(&mut stream).await {
        Ok(header) => header,
        Err(why) => {
            log::warn!("{door}: connection refused: {why}");
            stream.shutdown();
            return None;
        }
    };
    let source = header
        .source
        .map_or_else(|| "the proxy itself".to_string(), |a| a.to_string());
    let certified = match header.told {
        proxy::Told::Nobody => None,
        proxy::Told::Certified(Certified::Named(name)) => Some(name.into_boxed_str()),
        proxy::Told::Certified(Certified::Unnamed) => {
            log::warn!(
                "{door}: the proxy verified the certificate of {source} but it carries no Common Name; it names nobody, so the client is taken as one without a certificate"
            );
            None
        }
        proxy::Told::Unverified { verify_result } => {
            log::warn!(
                "{door}: the proxy could not verify the certificate of {source} (verify_result={verify_result}); it names nobody, so the client is taken as one without a certificate"
            );
            None
        }
    };
    match &certified {
        Some(name) => {
            log::info!("{door}: a proxy speaks for {source}, named {name:?} by the certificate it verified")
        }
        None => log::info!("{door}: a proxy speaks for {source}"),
    }
    Some(Opened {
        stream: Box::new(stream),
        learnt: Learnt {
            certified,
            source: header.source.map(crate::core::Source::Peer),
        },
    })
}

/// Who is at the far end of a Unix socket, as the kernel says: for the
/// connection's source, in logs and `/v1/operations/sessions`.
pub fn unix_peer(stream: &UnixStream) -> Option<Rc<str>> {
    let credentials = rustix::net::sockopt::socket_peercred(stream).ok()?;
    Some(
        format!(
            "uid {} (pid {})",
            credentials.uid.as_raw(),
            credentials.pid.as_raw_nonzero()
        )
        .into(),
    )
}
