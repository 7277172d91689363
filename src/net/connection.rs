//! One client connection: a reader that decodes packets into the core and a
//! writer that drains the connection's outbox onto the socket.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use smol::lock::Semaphore;

use async_net::{Shutdown, TcpStream};
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};

use super::outbox::{reader_may_continue, writable, Outbox};
use super::socket::{self, SocketReader, SocketWriter};
use super::{tls, SharedRef};
use crate::codec::{
    decode_fixed_header, decode_packet, peek_connect_version, DecodeError, FixedHeader, Packet,
    PacketType, ProtocolVersion, ReasonCode,
};
use crate::core::{Broker, Key};

/// A read buffer starts small, so that an idle connection costs little,
/// and grows while packets arrive faster than they are read.
const INITIAL_READ_BYTES: usize = 1024;
const MAX_IDLE_READ_BYTES: usize = 16 * 1024;
/// A read this small is the sign of a quiet connection.
const IDLE_READ_BYTES: usize = 256;
/// An outbox past this many unwritten bytes pauses reading from its client.
pub const OUTBOX_PAUSE_BYTES: usize = 256 * 1024;

const TOO_LARGE: DecodeError = DecodeError {
    code: ReasonCode::PACKET_TOO_LARGE,
    reason: "packet larger than the maximum packet size",
};

/// How long a closing TLS connection may take to say so to its client.
const CLOSE_NOTIFY_MS: u64 = 1_000;

/// A TLS door's configuration as it was when a connection arrived, and the
/// door's name for log lines.
pub struct Tls {
    pub config: Arc<rustls::ServerConfig>,
    pub door: Rc<str>,
}

/// Serves one accepted connection until it ends.
pub async fn serve(
    shared: SharedRef,
    stream: TcpStream,
    tls: Option<Tls>,
    key: Key,
    outbox: Outbox,
    write_timeout_ms: Option<u64>,
) {
    let halves = match tls {
        None => Some(socket::plain(stream)),
        Some(tls) => handshake(&shared, stream, tls, key, &outbox).await,
    };
    if let Some((reader, writer)) = halves {
        let reader = read_loop(shared.clone(), reader, key, outbox.clone());
        let writer = write_loop(shared.clone(), writer, key, outbox, write_timeout_ms);
        future::zip(reader, writer).await;
    }
    let mut guard = shared.borrow_mut();
    let shared = &mut *guard;
    let now_ms = shared.now_ms();
    shared
        .broker
        .handle_connection_lost(key, now_ms, &mut shared.outboxes);
    shared.outboxes.remove(key);
}

/// Runs a TLS handshake in the connection's slot, so it is bounded as a
/// CONNECT is: the core's connect timeout (or a shutdown) ends it. A
/// verified client certificate's name is handed to the core.
async fn handshake(
    shared: &SharedRef,
    stream: TcpStream,
    tls: Tls,
    key: Key,
    outbox: &Outbox,
) -> Option<(SocketReader, SocketWriter)> {
    let accept = futures_rustls::TlsAcceptor::from(tls.config).accept(stream.clone());
    let ended = async {
        reader_may_continue(outbox, None).await;
        None
    };
    let door = &tls.door;
    let peer = || {
        stream
            .peer_addr()
            .map_or_else(|_| "a client".to_string(), |a| a.to_string())
    };
    let established = match future::or(async { Some(accept.await) }, ended).await {
        Some(Ok(established)) => established,
        Some(Err(error)) => {
            let hint = tls::handshake_hint(&error);
            log::info!(
                "{door}: TLS handshake with {} failed: {error}{hint}",
                peer()
            );
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
        None => {
            log::info!(
                "{door}: TLS handshake with {} did not finish in time",
                peer()
            );
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
    };
    if let Some(certificate) = tls::client_certificate(established.get_ref().1) {
        match certificate.name() {
            Some(name) => shared.borrow_mut().broker.certified(key, name.into()),
            None => log::warn!(
                "{door}: the client certificate {} presented was verified but carries neither a Common Name nor a DNS name; it names nobody, so the client is taken as one without a certificate",
                peer()
            ),
        }
    }
    Some(socket::tls(established, stream))
}

/// Feeds one decoded packet, or the error that stopped decoding it, to the
/// core. Returns whether the connection is still open.
fn dispatch(shared: &SharedRef, key: Key, header: &crate::codec::FixedHeader, body: &[u8]) -> bool {
    let mut guard = shared.borrow_mut();
    let shared = &mut *guard;
    let now_ms = shared.now_ms();
    let broker: &mut Broker = &mut shared.broker;
    match decode_packet(header, body, broker.version(key)) {
        Ok(packet) => broker.handle_packet(key, packet, now_ms, &mut shared.outboxes),
        Err(error) => {
            let version = connect_version_hint(header.packet_type, body);
            broker.handle_decode_error(key, error, version, now_ms, &mut shared.outboxes);
        }
    }
    broker.is_open(key)
}

/// Password checks run one at a time on the blocking pool: a storm of
/// CONNECTs waits here as idle tasks, and the executor serving every other
/// client never computes a hash.
static CREDENTIAL_CHECKS: Semaphore = Semaphore::new(1);

/// Checks a CONNECT's password off the executor and hands the core the
/// verdict, where checking it takes a hash.
async fn check_credentials(shared: &SharedRef, key: Key, header: &FixedHeader, body: &[u8]) {
    let Ok(Packet::Connect(connect)) = decode_packet(header, body, None) else {
        return;
    };
    let (authentication, door) = {
        let state = shared.borrow();
        let Some(door) = state.broker.credential_door(key) else {
            return;
        };
        let authentication = state.broker.authentication();
        if !authentication.computes_hash(door, connect.username.as_deref()) {
            return;
        }
        (Arc::clone(authentication), door)
    };
    let _permit = CREDENTIAL_CHECKS.acquire().await;
    log::debug!("checking a password off the executor");
    let verdict = smol::unblock(move || {
        authentication.check(
            door,
            connect.username.as_deref(),
            connect.password.as_deref(),
        )
    })
    .await;
    shared.borrow_mut().broker.credentials_checked(key, verdict);
}

fn connect_version_hint(packet_type: u8, body: &[u8]) -> Option<ProtocolVersion> {
    (packet_type == PacketType::Connect as u8)
        .then(|| peek_connect_version(body))
        .flatten()
}

fn fail(shared: &SharedRef, key: Key, error: DecodeError, version: Option<ProtocolVersion>) {
    let mut guard = shared.borrow_mut();
    let shared = &mut *guard;
    let now_ms = shared.now_ms();
    shared
        .broker
        .handle_decode_error(key, error, version, now_ms, &mut shared.outboxes);
}

async fn read_loop(shared: SharedRef, mut stream: SocketReader, key: Key, outbox: Outbox) {
    let mut buf: Vec<u8> = Vec::new();
    let mut last_read_bytes = 0;
    loop {
        // Decode every packet that has fully arrived.
        let mut consumed = 0;
        let mut needed = 0;
        loop {
            let pending = &buf[consumed..];
            let header = match decode_fixed_header(pending) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(error) => return fail(&shared, key, error, None),
            };
            let limit_bytes = shared.borrow().broker.inbound_limit_bytes(key) as usize;
            if header.packet_len() > limit_bytes {
                // Refused on its declared length: the body is never read.
                let version =
                    connect_version_hint(header.packet_type, &pending[header.header_len..]);
                return fail(&shared, key, TOO_LARGE, version);
            }
            if pending.len() < header.packet_len() {
                needed = header.packet_len();
                break;
            }
            let body = &pending[header.header_len..header.packet_len()];
            if header.packet_type == PacketType::Connect as u8 {
                check_credentials(&shared, key, &header, body).await;
            }
            if !dispatch(&shared, key, &header, body) {
                return;
            }
            consumed += header.packet_len();
        }
        buf.drain(..consumed);
        // A connection whose traffic is a ping now and then holds no read
        // buffer between packets: most connections of a fleet are idle.
        if buf.is_empty()
            && (buf.capacity() > MAX_IDLE_READ_BYTES || last_read_bytes < IDLE_READ_BYTES)
        {
            buf = Vec::new();
        }

        // A client that does not read what it is sent is not read from.
        if outbox.borrow().bytes.len() > OUTBOX_PAUSE_BYTES {
            reader_may_continue(&outbox, Some(OUTBOX_PAUSE_BYTES / 2)).await;
        }

        if buf.capacity() == 0 {
            // Wait for data with nothing allocated; a byte on the stack
            // is enough to learn the socket is readable.
            let ready = future::or(async { Some(stream.wait_readable().await) }, async {
                reader_may_continue(&outbox, None).await;
                None
            })
            .await;
            match ready {
                Some(Ok(n)) if n > 0 => {}
                None => return,
                Some(_) => {
                    outbox.borrow_mut().mark_dead();
                    return;
                }
            }
        }
        let filled = buf.len();
        let room = (needed.saturating_sub(filled))
            .max(buf.capacity() - filled)
            .max(INITIAL_READ_BYTES);
        buf.resize(filled + room, 0);
        // Boxed, like the write below, so that an idle connection's task
        // is only as large as its wait for the next packet.
        let read = Box::pin(future::or(
            async { Some(stream.read(&mut buf[filled..]).await) },
            async {
                reader_may_continue(&outbox, None).await;
                None
            },
        ))
        .await;
        match read {
            Some(Ok(n)) if n > 0 => {
                stream.acknowledge_now();
                shared.borrow_mut().broker.count_wire_bytes(n as u64, 0);
                buf.truncate(filled + n);
                last_read_bytes = n;
            }
            // Ended by the broker: the writer flushes what is left, then closes.
            None => return,
            // Closed by the peer, or failed: nothing more can be written.
            Some(_) => {
                outbox.borrow_mut().mark_dead();
                return;
            }
        }
    }
}

async fn write_loop(
    shared: SharedRef,
    mut stream: SocketWriter,
    key: Key,
    outbox: Outbox,
    write_timeout_ms: Option<u64>,
) {
    let mut writing: Vec<u8> = Vec::new();
    loop {
        writable(&outbox).await;
        let closing = {
            let mut state = outbox.borrow_mut();
            if state.dead {
                break;
            }
            std::mem::swap(&mut state.bytes, &mut writing);
            if state.reader_paused {
                state.wake_reader();
            }
            state.closing
        };
        if !writing.is_empty() {
            let written = Box::pin(write_all_within(&mut stream, &writing, write_timeout_ms)).await;
            if written.is_ok() {
                let sent = writing.len() as u64;
                shared.borrow_mut().broker.count_wire_bytes(0, sent);
            }
            writing.clear();
            if writing.capacity() > OUTBOX_PAUSE_BYTES {
                writing = Vec::new();
            }
            if let Err(error) = written {
                log::info!("closing a connection whose writes failed: {error}");
                outbox.borrow_mut().mark_dead();
                let mut guard = shared.borrow_mut();
                let shared = &mut *guard;
                let now_ms = shared.now_ms();
                shared
                    .broker
                    .handle_connection_lost(key, now_ms, &mut shared.outboxes);
                break;
            }
        }
        if closing && outbox.borrow().bytes.is_empty() {
            future::or(stream.end(), sleep_ms(CLOSE_NOTIFY_MS)).await;
            outbox.borrow_mut().mark_dead();
            break;
        }
    }
}

/// Writes all of `bytes`, failing if the socket takes none of it for
/// `timeout_ms`. Most writes complete at once, so the deadline's timer is
/// armed only for one that has to wait: a timer costs the reactor work.
async fn write_all_within(
    stream: &mut SocketWriter,
    bytes: &[u8],
    timeout_ms: Option<u64>,
) -> std::io::Result<()> {
    // A TLS writer may keep records back until flushed; a plain one holds
    // nothing, and its flush costs nothing.
    let mut write = std::pin::pin!(async {
        stream.write_all(bytes).await?;
        stream.flush().await
    });
    if let Some(result) = future::poll_once(&mut write).await {
        return result;
    }
    let Some(timeout_ms) = timeout_ms else {
        return write.await;
    };
    let deadline = async {
        sleep_ms(timeout_ms).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "write_timeout",
        ))
    };
    future::or(write, deadline).await
}

async fn sleep_ms(duration_ms: u64) {
    smol::Timer::after(Duration::from_millis(duration_ms)).await;
}

/// Answers a socket that found every connection slot taken: once the
/// opening bytes of its CONNECT say which version it speaks, it is told
/// Server Busy in that version's words, then closed.
pub async fn refuse_busy(mut stream: TcpStream, wait_ms: u64) {
    let mut opening = [0u8; 16];
    let mut filled = 0;
    let read_opening = async {
        while filled < opening.len() {
            match stream.read(&mut opening[filled..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => filled += n,
            }
            if let Ok(Some(header)) = decode_fixed_header(&opening[..filled]) {
                if filled >= header.header_len + 7 {
                    break;
                }
            }
        }
    };
    future::or(read_opening, sleep_ms(wait_ms)).await;
    if let Ok(Some(header)) = decode_fixed_header(&opening[..filled]) {
        if header.packet_type == PacketType::Connect as u8 {
            let version = peek_connect_version(&opening[header.header_len..filled])
                .unwrap_or(ProtocolVersion::V311);
            let mut reply = Vec::new();
            crate::codec::encode(&Broker::busy_connack(), version, &mut reply);
            let write = async {
                let _ = stream.write_all(&reply).await;
            };
            future::or(write, sleep_ms(wait_ms)).await;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}
