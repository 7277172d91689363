//! Runs each bridge's link on the executor: an in-process session at this
//! broker (a connection with no socket, its outbox read by this task), and
//! a TCP connection to the peer, redialled with jittered backoff.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use async_net::TcpStream;
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::{LocalExecutor, Task};

use super::outbox::{writable, Outbox};
use super::SharedRef;
use crate::bridge::{Action, BridgeSettings, Carriage, Link};
use crate::codec::{decode_fixed_header, decode_packet, encode, Packet, ProtocolVersion};
use crate::core::claims::Claims;
use crate::core::{ChannelSettings, Key};

/// How long a TCP connect to the peer may take.
const DIAL_TIMEOUT_MS: u64 = 10_000;
/// A peer packet larger than this ends the link: nothing a bridge asks
/// for is near it, and reading it would mean holding it.
const MAX_PEER_PACKET_BYTES: usize = 16 * 1024 * 1024;
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
    local: Key,
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
                    peer: format!("tcp://{}", link.settings().peer.address()),
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

/// Starts every bridge; each runs until [`Running::stop`].
pub fn start(
    executor: &'static LocalExecutor<'static>,
    shared: &SharedRef,
    bridges: &[BridgeSettings],
) -> Running {
    let mut tasks = Vec::new();
    let mut locals = Vec::new();
    let mut running = Vec::new();
    for settings in bridges {
        let classify = classifier(&shared.borrow().broker.settings().channels);
        let (local, outbox) = {
            let mut guard = shared.borrow_mut();
            let state = &mut *guard;
            let now_ms = state.now_ms();
            let Some(key) = state.broker.accept_bridge(now_ms) else {
                log::error!(
                    "bridge {}: no connection slot left for its session here; raise limits.max_connections",
                    settings.name
                );
                continue;
            };
            (key, state.outboxes.insert(key))
        };
        let seed = settings
            .name
            .bytes()
            .fold(std::process::id() as u64, |h, b| {
                h.rotate_left(5) ^ u64::from(b)
            });
        let (wake_peer_writer, peer_writer_woken) = smol::channel::bounded(1);
        let bridge = Rc::new(Bridge {
            shared: shared.clone(),
            link: RefCell::new(Link::new(settings.clone(), classify, seed)),
            local,
            peer_out: RefCell::new(PeerOut::default()),
            wake_peer_writer,
            peer_writer_woken,
        });
        locals.push(local);
        let connect = bridge.link.borrow().local_connect();
        bridge.to_local(connect);
        tasks.push(executor.spawn(local_loop(bridge.clone(), outbox)));
        tasks.push(executor.spawn(tick_loop(bridge.clone())));
        running.push(bridge.clone());
        tasks.push(executor.spawn(peer_loop(bridge)));
    }
    Running {
        tasks,
        locals,
        bridges: running,
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

    fn to_local(&self, packet: Packet) {
        let mut guard = self.shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        state
            .broker
            .handle_packet(self.local, packet, now_ms, &mut state.outboxes);
    }

    fn apply(&self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::ToLocal(packet) => self.to_local(packet),
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

/// Reads what this broker sends the bridge's session and feeds it to the link.
async fn local_loop(bridge: Rc<Bridge>, outbox: Outbox) {
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
                let actions = bridge.link.borrow_mut().local_packet(packet, now_ms);
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
async fn peer_loop(bridge: Rc<Bridge>) {
    let address = bridge.link.borrow().settings().peer.address();
    loop {
        let dialled = future::or(
            async { Some(TcpStream::connect(address.as_str()).await) },
            async {
                smol::Timer::after(Duration::from_millis(DIAL_TIMEOUT_MS)).await;
                None
            },
        )
        .await;
        let why = match dialled {
            Some(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                serve_peer(&bridge, stream).await
            }
            Some(Err(error)) => format!("cannot connect: {error}"),
            None => "connect timed out".to_string(),
        };
        let retry_in_311 = bridge.link.borrow_mut().peer_unreadable_before_connack();
        let now_ms = bridge.now_ms();
        let (wait_ms, actions) = bridge.link.borrow_mut().peer_lost(now_ms, &why);
        bridge.apply(actions);
        *bridge.peer_out.borrow_mut() = PeerOut::default();
        if !retry_in_311 {
            smol::Timer::after(Duration::from_millis(wait_ms)).await;
        }
    }
}

/// One connection to the peer; returns why it ended.
async fn serve_peer(bridge: &Rc<Bridge>, stream: TcpStream) -> String {
    *bridge.peer_out.borrow_mut() = PeerOut::default();
    let now_ms = bridge.now_ms();
    let connect = bridge.link.borrow_mut().peer_connecting(now_ms);
    bridge.apply(vec![Action::ToPeer(connect)]);
    let reader = read_peer(bridge, stream.clone());
    let writer = write_peer(bridge, stream.clone());
    let why = future::or(reader, writer).await;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    why
}

async fn read_peer(bridge: &Rc<Bridge>, mut stream: TcpStream) -> String {
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

async fn write_peer(bridge: &Rc<Bridge>, mut stream: TcpStream) -> String {
    loop {
        let (bytes, close) = {
            let mut out = bridge.peer_out.borrow_mut();
            (std::mem::take(&mut out.bytes), out.close.take())
        };
        if !bytes.is_empty() {
            if let Err(error) = stream.write_all(&bytes).await {
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
