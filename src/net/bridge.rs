//! Runs each bridge's link on the executor: in-process sessions at this
//! broker (connections with no socket, their outboxes read by this task:
//! one that publishes what the peer sends, one reader per outbound rule), and
//! a TCP connection to the peer (TLS for a `tls://` or `wss://` one, always
//! verified; MQTT over WebSocket for a `ws://` or `wss://` one), redialled
//! with jittered backoff.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use async_executor::StaticLocalExecutor;
use async_net::TcpStream;
use smol::future;
use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use smol::Task;

use super::outbox::{writable, Outbox};
use super::socket::Duplex;
use super::tls::client::PeerTlsConfig;
use super::websocket::handshake as handshake_ws;
use super::websocket::WsStream;
use super::SharedRef;
use crate::bridge::{Action, BridgeSettings, Carriage, Link, Local, Peer};
use crate::codec::{decode_fixed_header, decode_packet, encode, Packet, ProtocolVersion};
use crate::core::claims::Claims;
use crate::core::{ChannelSettings, Key};

/// How long a TCP connect to the peer may take, and then a TLS handshake.
const DIAL_TIMEOUT_MS: u64 = 10_000;
/// A peer packet larger than this ends the link: nothing a bridge asks
/// for is near it, and reading it would mean holding it.
pub(super) const MAX_PEER_PACKET_BYTES: usize = 16 * 1024 * 1024;
/// How often a paused read checks whether the peer's records have room.
const INBOUND_FULL_POLL_MS: u64 = 5;

/// What the link has asked to be written to the peer.
#[derive(Default)]
struct PeerOut {
    bytes: Vec<u8>,
    close: Option<&'static str>,
}

struct Bridge {
    shared: SharedRef,
    link: RefCell<Link>,
    /// The connection here of each of the bridge's sessions.
    locals: Vec<(Local, Key)>,
    peer_out: RefCell<PeerOut>,
    wake_peer_writer: smol::channel::Sender<()>,
    peer_writer_woken: smol::channel::Receiver<()>,
}

/// The running bridges: their tasks, and their sessions' connections here.
pub struct Running {
    tasks: Vec<Task<()>>,
    locals: Vec<Key>,
    bridges: Vec<Rc<Bridge>>,
}

/// Reads the running bridges' counters for the operations listener,
/// changing nothing.
#[derive(Clone, Default)]
pub struct Observer(Vec<Rc<Bridge>>);

impl Observer {
    pub fn observe(&self) -> Vec<crate::ops::BridgeObservation> {
        self.0
            .iter()
            .map(|bridge| {
                let link = bridge.link.borrow();
                crate::ops::BridgeObservation {
                    name: link.name().to_string(),
                    peer: link.settings().peer.url(),
                    connected: link.is_up(),
                    stats: link.stats.clone(),
                }
            })
            .collect()
    }
}

impl Running {
    pub fn observer(&self) -> Observer {
        Observer(self.bridges.clone())
    }

    /// Stops every bridge and ends its session's connection here, which
    /// stores its positions as any consumer's are when it leaves.
    pub fn stop(self, shared: &SharedRef) {
        drop(self.tasks);
        let mut guard = shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        for key in self.locals {
            state
                .broker
                .handle_connection_lost(key, now_ms, &mut state.outboxes);
            state.outboxes.remove(key);
        }
    }
}

/// Starts every bridge; each runs until [`Running::stop`]. `tls` holds
/// each bridge's TLS, in order, `None` for a `tcp://` peer.
pub fn start(
    executor: &'static StaticLocalExecutor,
    shared: &SharedRef,
    bridges: &[BridgeSettings],
    tls: Vec<Option<PeerTlsConfig>>,
) -> Running {
    let mut tasks = Vec::new();
    let mut locals = Vec::new();
    let mut running = Vec::new();
    end_removed_readers(shared, bridges);
    for (settings, tls) in bridges.iter().zip(tls) {
        let classify = classifier(&shared.borrow().broker.settings().channels);
        let seed = settings
            .name
            .bytes()
            .fold(std::process::id() as u64, |h, b| {
                h.rotate_left(5) ^ u64::from(b)
            });
        let link = Link::new(settings.clone(), classify, seed);
        let connects = link.local_connects();
        let mut sessions = Vec::new();
        for (local, connect) in connects {
            let mut guard = shared.borrow_mut();
            let state = &mut *guard;
            let now_ms = state.now_ms();
            let Some(key) = state.broker.accept_bridge(now_ms) else {
                log::error!(
                    "bridge {}: no connection slot left for its sessions here; raise limits.max_connections",
                    settings.name
                );
                break;
            };
            sessions.push((local, key, state.outboxes.insert(key), connect));
        }
        locals.extend(sessions.iter().map(|(_, key, _, _)| *key));
        let (wake_peer_writer, peer_writer_woken) = smol::channel::bounded(1);
        let bridge = Rc::new(Bridge {
            shared: shared.clone(),
            link: RefCell::new(link),
            locals: sessions
                .iter()
                .map(|(local, key, _, _)| (*local, *key))
                .collect(),
            peer_out: RefCell::new(PeerOut::default()),
            wake_peer_writer,
            peer_writer_woken,
        });
        for (local, _, outbox, connect) in sessions {
            bridge.to_local(local, connect);
            tasks.push(executor.spawn(local_loop(bridge.clone(), local, outbox)));
        }
        tasks.push(executor.spawn(tick_loop(bridge.clone())));
        running.push(bridge.clone());
        tasks.push(executor.spawn(peer_loop(bridge, tls)));
    }
    Running {
        tasks,
        locals,
        bridges: running,
    }
}

/// Ends the stored session of every reader no configured rule names (a
/// rule removed, or its filter or topic edited), so its positions go with
/// the line that made them rather than living on.
fn end_removed_readers(shared: &SharedRef, bridges: &[BridgeSettings]) {
    let configured: Vec<String> = bridges
        .iter()
        .flat_map(|b| {
            b.readers()
                .map(|rule| b.reader_client_id(rule))
                .chain([b.local_client_id()])
                .collect::<Vec<_>>()
        })
        .collect();
    let mut guard = shared.borrow_mut();
    let state = &mut *guard;
    for client_id in state.broker.bridge_client_ids() {
        if configured.contains(&client_id) {
            continue;
        }
        let now_ms = state.now_ms();
        let Some(key) = state.broker.accept_bridge(now_ms) else {
            return;
        };
        state.outboxes.insert(key);
        let mut connect = crate::codec::Connect {
            protocol_version: ProtocolVersion::V5,
            clean_start: true,
            keep_alive_s: 0,
            client_id: client_id.clone(),
            will: None,
            username: None,
            password: None,
            properties: Default::default(),
        };
        connect.properties.session_expiry_interval_s = Some(0);
        state.broker.handle_packet(
            key,
            Packet::Connect(Box::new(connect)),
            now_ms,
            &mut state.outboxes,
        );
        state
            .broker
            .handle_connection_lost(key, now_ms, &mut state.outboxes);
        state.outboxes.remove(key);
        log::warn!(
            "bridge session {client_id} belongs to no configured rule (removed, or its filter or topic edited): ended, and its positions with it"
        );
    }
}

/// What kind of record a topic holds: a `latest` channel's, another
/// channel's, or broadcast.
fn classifier(channels: &[ChannelSettings]) -> Box<dyn Fn(&str) -> Carriage> {
    let kinds: Vec<Carriage> = channels
        .iter()
        .map(|c| match c.latest {
            Some(_) => Carriage::Latest,
            None => Carriage::Stored,
        })
        .collect();
    let named: Vec<(&str, &[String])> = channels
        .iter()
        .map(|c| (c.name.as_str(), c.filters.as_slice()))
        .collect();
    let claims = Claims::new(&named);
    Box::new(move |topic| {
        claims
            .channel_for_topic(topic)
            .map_or(Carriage::Live, |at| kinds[at])
    })
}

impl Bridge {
    fn now_ms(&self) -> u64 {
        self.shared.borrow().now_ms()
    }

    fn to_local(&self, to: Local, packet: Packet) {
        let Some(&(_, key)) = self.locals.iter().find(|(local, _)| *local == to) else {
            return;
        };
        let mut guard = self.shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        state
            .broker
            .handle_packet(key, packet, now_ms, &mut state.outboxes);
    }

    /// Stores the positions the rules' readers moved since the last
    /// `ack_commit_interval`, so a restart does not send the peer again
    /// what it took before its link went.
    fn store_positions(&self) {
        let mut guard = self.shared.borrow_mut();
        let state = &mut *guard;
        for &(_, key) in &self.locals {
            state
                .broker
                .store_bridge_positions(key, &mut state.outboxes);
        }
    }

    fn apply(&self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::ToLocal(to, packet) => self.to_local(to, packet),
                Action::ToPeer(packet) => {
                    let version = self.link.borrow().peer_version();
                    encode(&packet, version, &mut self.peer_out.borrow_mut().bytes);
                    let _ = self.wake_peer_writer.try_send(());
                }
                Action::ClosePeer(why) => {
                    self.peer_out.borrow_mut().close = Some(why);
                    let _ = self.wake_peer_writer.try_send(());
                }
            }
        }
    }
}

/// Reads what this broker sends one of the bridge's sessions and feeds it
/// to the link.
async fn local_loop(bridge: Rc<Bridge>, from: Local, outbox: Outbox) {
    let mut buf = Vec::new();
    loop {
        writable(&outbox).await;
        {
            let mut state = outbox.borrow_mut();
            buf.extend_from_slice(&state.bytes);
            state.bytes.clear();
            if state.dead || state.closing {
                log::error!(
                    "bridge {}: this broker ended the bridge's own session; the bridge stops",
                    bridge.link.borrow().name()
                );
                return;
            }
        }
        let mut consumed = 0;
        while let Ok(Some(header)) = decode_fixed_header(&buf[consumed..]) {
            if buf.len() - consumed < header.packet_len() {
                break;
            }
            let body = &buf[consumed + header.header_len..consumed + header.packet_len()];
            let packet = decode_packet(&header, body, Some(ProtocolVersion::V5));
            consumed += header.packet_len();
            if let Ok(packet) = packet {
                let now_ms = bridge.now_ms();
                let actions = bridge.link.borrow_mut().local_packet(from, packet, now_ms);
                bridge.apply(actions);
            }
        }
        buf.drain(..consumed);
    }
}

async fn tick_loop(bridge: Rc<Bridge>) {
    let interval_ms = bridge.link.borrow().settings().ack_interval_ms;
    loop {
        smol::Timer::after(Duration::from_millis(interval_ms)).await;
        let now_ms = bridge.now_ms();
        let actions = bridge.link.borrow_mut().tick(now_ms);
        bridge.apply(actions);
    }
}

/// Dials the peer, serves the connection until it ends, waits, and again.
async fn peer_loop(bridge: Rc<Bridge>, tls: Option<PeerTlsConfig>) {
    let peer = bridge.link.borrow().settings().peer.clone();
    let address = peer.address();
    // A refused handshake is logged when its reason changes, not per attempt.
    let mut last_refusal: Option<String> = None;
    loop {
        let why = match timed(TcpStream::connect(address.as_str())).await {
            Some(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                if tls.is_none() && peer.websocket.is_none() {
                    serve_peer(&bridge, stream.clone(), stream.clone(), stream).await
                } else {
                    match open_peer(&peer, tls.as_ref(), stream.clone()).await {
                        Ok(opened) => {
                            last_refusal = None;
                            let (reader, writer) = smol::io::split(opened);
                            serve_peer(&bridge, reader, writer, stream).await
                        }
                        Err(why) => {
                            if last_refusal.as_ref() != Some(&why) {
                                log::warn!(
                                    "bridge {}: {} refused: {why}; retrying",
                                    bridge.link.borrow().name(),
                                    peer.url()
                                );
                                last_refusal = Some(why.clone());
                            }
                            why
                        }
                    }
                }
            }
            Some(Err(error)) => format!("cannot connect: {error}"),
            None => "connect timed out".to_string(),
        };
        let retry_in_311 = bridge.link.borrow_mut().peer_unreadable_before_connack();
        // Before the link's end is logged: what the peer took is stored.
        bridge.store_positions();
        let now_ms = bridge.now_ms();
        let (wait_ms, actions) = bridge.link.borrow_mut().peer_lost(now_ms, &why);
        bridge.apply(actions);
        *bridge.peer_out.borrow_mut() = PeerOut::default();
        if !retry_in_311 {
            smol::Timer::after(Duration::from_millis(wait_ms)).await;
        }
    }
}

/// The TLS handshake (for `tls://` and `wss://`) and the WebSocket
/// upgrade (for `ws://` and `wss://`) over a connection to the peer.
async fn open_peer(
    peer: &Peer,
    tls: Option<&PeerTlsConfig>,
    stream: TcpStream,
) -> Result<Box<dyn Duplex>, String> {
    let secured: Box<dyn Duplex> = match tls {
        None => Box::new(stream),
        Some(tls) => Box::new(handshake(tls, stream).await.map_err(|why| {
            format!("{why} (ca_file names the authority that signs the peer's certificate)")
        })?),
    };
    let Some(path) = &peer.websocket else {
        return Ok(secured);
    };
    match timed(upgrade(secured, &peer.address(), path)).await {
        Some(upgraded) => upgraded,
        None => Err("the WebSocket upgrade timed out".to_string()),
    }
}

/// Asks the peer to upgrade `stream` to MQTT over WebSocket at `path`.
async fn upgrade(
    mut stream: Box<dyn Duplex>,
    host: &str,
    path: &str,
) -> Result<Box<dyn Duplex>, String> {
    use ring::rand::SecureRandom;
    let mut key = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| "no random bytes for the WebSocket key".to_string())?;
    let (request, key) = handshake_ws::request(host, path, key);
    let failed = |error: std::io::Error| format!("the WebSocket upgrade failed: {error}");
    stream.write_all(&request).await.map_err(failed)?;
    stream.flush().await.map_err(failed)?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(failed)?;
        if n == 0 {
            return Err("the peer closed the connection during the WebSocket upgrade".into());
        }
        answer.extend_from_slice(&chunk[..n]);
        if let Some(head_bytes) = handshake_ws::check_answer(&answer, &key)? {
            let early = answer.split_off(head_bytes);
            let framed = WsStream::client(stream, early, MAX_PEER_PACKET_BYTES as u64);
            return Ok(Box::new(framed));
        }
    }
}

/// `step`, or `None` once [`DIAL_TIMEOUT_MS`] has passed.
async fn timed<T>(step: impl std::future::Future<Output = T>) -> Option<T> {
    future::or(async { Some(step.await) }, async {
        smol::Timer::after(Duration::from_millis(DIAL_TIMEOUT_MS)).await;
        None
    })
    .await
}

/// The TLS handshake, the peer's certificate verified.
async fn handshake(
    tls: &PeerTlsConfig,
    stream: TcpStream,
) -> Result<futures_rustls::client::TlsStream<TcpStream>, String> {
    let connector = futures_rustls::TlsConnector::from(tls.config.clone());
    match timed(connector.connect(tls.server_name.clone(), stream)).await {
        Some(Ok(secured)) => Ok(secured),
        Some(Err(error)) => Err(format!("TLS handshake failed: {error}")),
        None => Err("TLS handshake timed out".to_string()),
    }
}

/// One connection to the peer; returns why it ended.
async fn serve_peer(
    bridge: &Rc<Bridge>,
    reader: impl AsyncRead + Unpin,
    writer: impl AsyncWrite + Unpin,
    tcp: TcpStream,
) -> String {
    *bridge.peer_out.borrow_mut() = PeerOut::default();
    let now_ms = bridge.now_ms();
    let connect = bridge.link.borrow_mut().peer_connecting(now_ms);
    bridge.apply(vec![Action::ToPeer(connect)]);
    let why = future::or(read_peer(bridge, reader), write_peer(bridge, writer)).await;
    let _ = tcp.shutdown(std::net::Shutdown::Both);
    why
}

async fn read_peer(bridge: &Rc<Bridge>, mut stream: impl AsyncRead + Unpin) -> String {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        // Records waiting to be stored fill the window: the peer waits in
        // TCP until this broker has taken them.
        while bridge.link.borrow().inbound_full() {
            smol::Timer::after(Duration::from_millis(INBOUND_FULL_POLL_MS)).await;
        }
        let n = match stream.read(&mut chunk).await {
            Ok(0) => return "the peer closed the connection".into(),
            Ok(n) => n,
            Err(error) => return format!("read failed: {error}"),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut consumed = 0;
        loop {
            let header = match decode_fixed_header(&buf[consumed..]) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(error) => return format!("unreadable packet from the peer: {error}"),
            };
            if header.packet_len() > MAX_PEER_PACKET_BYTES {
                return "the peer sent a packet larger than a bridge reads".into();
            }
            if buf.len() - consumed < header.packet_len() {
                break;
            }
            let body = &buf[consumed + header.header_len..consumed + header.packet_len()];
            let version = bridge.link.borrow().peer_version();
            let packet = match decode_packet(&header, body, Some(version)) {
                Ok(packet) => packet,
                Err(error) => return format!("unreadable packet from the peer: {error}"),
            };
            consumed += header.packet_len();
            let now_ms = bridge.now_ms();
            let actions = bridge.link.borrow_mut().peer_packet(packet, now_ms);
            bridge.apply(actions);
        }
        buf.drain(..consumed);
    }
}

async fn write_peer(bridge: &Rc<Bridge>, mut stream: impl AsyncWrite + Unpin) -> String {
    loop {
        let (bytes, close) = {
            let mut out = bridge.peer_out.borrow_mut();
            (std::mem::take(&mut out.bytes), out.close.take())
        };
        if !bytes.is_empty() {
            // A flush hands what TLS holds to the socket; plain TCP holds nothing.
            if let Err(error) = stream.write_all(&bytes).await {
                return format!("write failed: {error}");
            }
            if let Err(error) = stream.flush().await {
                return format!("write failed: {error}");
            }
        }
        if let Some(why) = close {
            return why.to_string();
        }
        if bridge.peer_out.borrow().bytes.is_empty() {
            let _ = bridge.peer_writer_woken.recv().await;
        }
    }
}
