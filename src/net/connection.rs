//! One client connection, served by one future: it reads packets into the
//! core and writes the connection's outbox onto the socket, and it waits for
//! "socket readable, socket writable or outbox changed" in one place. An
//! idle connection holds no buffer and nothing boxed; what only a TLS,
//! WebSocket or Unix door, a password check or a stalled write needs is
//! boxed while it lasts (`socket.rs`).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::lock::Semaphore;
use smol::Timer;

use super::outbox::Outbox;
use super::socket::{Duplex, Socket};
use super::SharedRef;
use crate::codec::{
    decode_first_header, decode_fixed_header, decode_packet, peek_connect_version, DecodeError,
    FixedHeader, Packet, PacketType, ProtocolVersion, ReasonCode,
};
use crate::core::{Broker, Key};
use crate::log_limit::{limited, LogLimit};

/// A client that asks and does not read is said to be at its bound once
/// per pause; many of them would say it often.
pub(super) static READING_PAUSED: LogLimit = LogLimit::new(
    "reading from a client paused",
    log::Level::Debug,
    10,
    60_000,
);

/// Each read lands in a buffer of this size on the stack; only the tail
/// of a packet that has not fully arrived is kept between reads.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;
thread_local! {
    /// The buffer every connection on this thread reads into, taken for
    /// the length of one read and its packets. A fresh zeroed chunk per
    /// read (even one that finds nothing) cost more than the packets it
    /// carried on a fan-out (rfcs/0001).
    static READ_CHUNK: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}
/// Reads one poll may take before it lets the other tasks run.
const READS_PER_POLL: u32 = 16;
/// The bound on what a connection is owed and has not taken: its outbox's
/// unwritten bytes and the replies the core still owes it. At the bound no
/// packet of the client's is taken, and nothing more is read from it,
/// until it has read half of it (rfcs/0003, "Per-connection memory").
pub const OUTBOX_PAUSE_BYTES: usize = 256 * 1024;

const TOO_LARGE: DecodeError = DecodeError {
    code: ReasonCode::PACKET_TOO_LARGE,
    reason: "packet larger than the maximum packet size",
};

/// How long a closing TLS or WebSocket connection may take to say so to
/// its client.
const CLOSE_NOTIFY_MS: u64 = 1_000;

/// Serves one accepted connection until it ends.
pub fn serve(shared: SharedRef, socket: Socket, key: Key, outbox: Outbox) -> Connection {
    Connection {
        shared,
        key,
        outbox,
        socket,
        rare: Rare::default(),
        reading_paused: false,
        read_ended: false,
        connect_checked: false,
    }
}

/// The future serving one connection.
pub struct Connection {
    shared: SharedRef,
    key: Key,
    outbox: Outbox,
    socket: Socket,
    /// A split packet, a password check, a stalled write: boxed while
    /// any of them lasts.
    rare: Rare,
    /// What the client is owed reached its bound: nothing is read until
    /// it halves.
    reading_paused: bool,
    /// A malformed packet or the core ended reading; what is queued is
    /// still written.
    read_ended: bool,
    /// The CONNECT at the front of `partial` has had its password checked.
    connect_checked: bool,
}

type CredentialCheck = Pin<Box<dyn Future<Output = ()>>>;

/// What a connection holds only now and then, behind one pointer made
/// when the first of them is needed and freed when the last is gone: an
/// idle connection's future carries 8 B for all three.
#[derive(Default)]
struct Rare(Option<Box<RareParts>>);

#[derive(Default)]
struct RareParts {
    /// The start of a packet that has not fully arrived.
    partial: Vec<u8>,
    /// The password check of the CONNECT at the front of `partial`.
    check: Option<CredentialCheck>,
    /// Armed while the socket takes nothing: the write timeout, then the
    /// time a TLS goodbye may take.
    deadline: Option<Timer>,
}

impl Rare {
    /// The parts, made if there are none.
    fn parts(&mut self) -> &mut RareParts {
        self.0.get_or_insert_with(Box::default)
    }

    fn partial(&self) -> &[u8] {
        self.0
            .as_deref()
            .map_or(&[], |parts| parts.partial.as_slice())
    }

    /// Whether a whole packet (or one that cannot be read) waits in the
    /// split-packet buffer: one held back while the client was at its bound.
    fn packet_waiting(&self) -> bool {
        match decode_fixed_header(self.partial()) {
            Ok(Some(header)) => self.partial().len() >= header.packet_len(),
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// Takes the split packet out, leaving none.
    fn take_partial(&mut self) -> Vec<u8> {
        self.0
            .as_mut()
            .map(|parts| std::mem::take(&mut parts.partial))
            .unwrap_or_default()
    }

    fn check(&mut self) -> Option<&mut CredentialCheck> {
        self.0.as_mut()?.check.as_mut()
    }

    fn disarm(&mut self) {
        if let Some(parts) = &mut self.0 {
            parts.deadline = None;
        }
    }

    /// The deadline, armed `after_ms` from now unless it is already.
    fn deadline(&mut self, after_ms: u64) -> &mut Timer {
        self.parts()
            .deadline
            .get_or_insert_with(|| Timer::after(Duration::from_millis(after_ms)))
    }

    /// Frees the box once nothing in it is in use.
    fn tidy(&mut self) {
        let unused = self.0.as_ref().is_some_and(|parts| {
            parts.partial.capacity() == 0 && parts.check.is_none() && parts.deadline.is_none()
        });
        if unused {
            self.0 = None;
        }
    }
}

/// What one pass over the connection achieved.
enum Step {
    /// Something moved: look again.
    Progress,
    /// Every source of progress has the task's waker.
    Wait,
    /// Reading could go on, but other tasks get their turn first.
    Yield,
    /// The connection is over.
    Done,
}

/// Where the outbox stands after writing what the socket would take.
enum Wrote {
    Drained,
    Progress,
    Blocked,
}

impl Future for Connection {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // The lines written while it polls name this connection.
        let _scope = crate::logging::enter(this.shared.borrow().log_scope(this.key));
        // Packets the core queues while this poll runs are written by it:
        // no need to be woken for them.
        this.outbox.borrow_mut().forget_waker();
        let mut reads = 0;
        loop {
            match this.advance(cx, &mut reads) {
                Step::Progress => continue,
                Step::Wait => {
                    this.outbox.borrow_mut().set_waker(cx.waker());
                    this.rare.tidy();
                    return Poll::Pending;
                }
                Step::Yield => {
                    cx.waker().wake_by_ref();
                    this.rare.tidy();
                    return Poll::Pending;
                }
                Step::Done => {
                    this.finish();
                    return Poll::Ready(());
                }
            }
        }
    }
}

impl Connection {
    fn advance(&mut self, cx: &mut Context<'_>, reads: &mut u32) -> Step {
        let (closing, dead) = {
            let outbox = self.outbox.borrow();
            (outbox.closing, outbox.dead)
        };
        if dead {
            return Step::Done;
        }
        if self.socket.in_opening() {
            return self.open(cx, closing);
        }
        let wrote = match self.write(cx) {
            Ok(wrote) => wrote,
            Err(error) => {
                log::info!("closing a connection whose writes failed: {error}");
                return Step::Done;
            }
        };
        let moved = matches!(wrote, Wrote::Progress);
        let idle = if moved { Step::Progress } else { Step::Wait };
        if closing {
            // Ended by the broker: what is queued is written, then the
            // socket is closed.
            return match wrote {
                Wrote::Drained => self.close(cx),
                _ => idle,
            };
        }
        if let Some(check) = self.rare.check() {
            if check.as_mut().poll(cx).is_pending() {
                return idle;
            }
            self.rare.parts().check = None;
            self.connect_checked = true;
            let _ = self.consume_partial();
            return Step::Progress;
        }
        // A client that does not read what it is sent is not read from.
        let backlog = self.backlog_bytes();
        if backlog >= OUTBOX_PAUSE_BYTES {
            self.pause_reading(backlog);
        } else if backlog < OUTBOX_PAUSE_BYTES / 2 {
            self.reading_paused = false;
        }
        if self.reading_paused || self.read_ended {
            return idle;
        }
        // Packets read and held back at the bound go before more is read.
        if self.rare.packet_waiting() {
            return match self.consume_partial() {
                true => Step::Progress,
                false => idle,
            };
        }
        if *reads >= READS_PER_POLL {
            return Step::Yield;
        }
        match self.read(cx) {
            Poll::Ready(Ok(true)) => {
                *reads += 1;
                Step::Progress
            }
            // Closed by the peer, or failed: nothing more can be written.
            Poll::Ready(Ok(false) | Err(_)) => Step::Done,
            Poll::Pending => idle,
        }
    }

    /// Runs the socket's opening (a TLS handshake, a WebSocket upgrade, a
    /// PROXY header) on, and hands the core what it learnt of the client.
    fn open(&mut self, cx: &mut Context<'_>, closing: bool) -> Step {
        let learnt = match self.socket.poll_opening(cx, closing) {
            Poll::Pending => return Step::Wait,
            Poll::Ready(None) => return Step::Done,
            Poll::Ready(Some(learnt)) => learnt,
        };
        let mut shared = self.shared.borrow_mut();
        if let Some(name) = learnt.certified {
            shared.broker.certified(self.key, name);
        }
        if let Some(source) = learnt.source {
            shared.broker.introduced_from(self.key, source);
        }
        Step::Progress
    }

    /// Hands the socket as much of the outbox as it takes now, and fails
    /// once it has taken nothing for the write timeout.
    fn write(&mut self, cx: &mut Context<'_>) -> io::Result<Wrote> {
        let mut outbox = self.outbox.borrow_mut();
        let mut moved = false;
        while outbox.unwritten_bytes() > 0 {
            match self.socket.poll_write(cx, outbox.unwritten()) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    outbox.took(n);
                    self.shared
                        .borrow_mut()
                        .broker
                        .count_wire_bytes(0, n as u64);
                    moved = true;
                    self.rare.disarm();
                }
                Poll::Ready(Err(error)) => return Err(error),
                Poll::Pending => break,
            }
        }
        // A TLS writer may keep records back until flushed; a plain one
        // holds nothing, and its flush costs nothing.
        let all_taken = outbox.unwritten_bytes() == 0;
        if all_taken {
            match self.socket.poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    self.rare.disarm();
                    outbox.drained();
                    return Ok(if moved {
                        Wrote::Progress
                    } else {
                        Wrote::Drained
                    });
                }
                Poll::Ready(Err(error)) => return Err(error),
                Poll::Pending => {}
            }
        } else {
            outbox.compact();
        }
        if moved {
            return Ok(Wrote::Progress);
        }
        // Most writes complete at once, so the deadline's timer is armed
        // only for one that has to wait: a timer costs the reactor work.
        let write_timeout_ms = self.shared.borrow().write_timeout_ms;
        if let Some(timeout_ms) = write_timeout_ms {
            if Pin::new(self.rare.deadline(timeout_ms)).poll(cx).is_ready() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "write_timeout"));
            }
        }
        Ok(Wrote::Blocked)
    }

    /// Ends the connection in both directions; over TLS or WebSocket,
    /// after telling the client so, for at most `CLOSE_NOTIFY_MS`.
    fn close(&mut self, cx: &mut Context<'_>) -> Step {
        let late = match &self.socket {
            Socket::Plain(_) => false,
            Socket::Layered(_) => Pin::new(self.rare.deadline(CLOSE_NOTIFY_MS))
                .poll(cx)
                .is_ready(),
        };
        match self.socket.poll_close(cx, late) {
            Poll::Pending => Step::Wait,
            Poll::Ready(()) => Step::Done,
        }
    }

    /// Bytes read off the socket, for `saguin_bytes_received_total`.
    fn count_read(&self, n: usize) {
        self.shared
            .borrow_mut()
            .broker
            .count_wire_bytes(n as u64, 0);
    }

    /// Reads what the client has sent and feeds every packet that has
    /// fully arrived to the core. Ready(false) when the peer has closed.
    fn read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let needed = match decode_fixed_header(self.rare.partial()) {
            Ok(Some(header)) => header.packet_len(),
            _ => 0,
        };
        if needed > READ_CHUNK_BYTES {
            // A large packet is read straight into its own buffer.
            let partial = &mut self.rare.parts().partial;
            let filled = partial.len();
            partial.resize(needed, 0);
            let read = self.socket.poll_read(cx, &mut partial[filled..]);
            let n = match read {
                Poll::Ready(Ok(n)) => n,
                _ => 0,
            };
            partial.truncate(filled + n);
            if n == 0 {
                return read.map_ok(|_| false);
            }
            self.socket.acknowledge_now();
            self.count_read(n);
            let _ = self.consume_partial();
            return Poll::Ready(Ok(true));
        }
        let mut chunk = READ_CHUNK.take();
        if chunk.is_empty() {
            // The thread's first read; a read nested in another (none is)
            // would find the buffer taken and make its own.
            chunk = vec![0; READ_CHUNK_BYTES];
        }
        let read = self.read_chunk(cx, &mut chunk);
        READ_CHUNK.set(chunk);
        read
    }

    /// [`Connection::read`] into the thread's read buffer.
    fn read_chunk(&mut self, cx: &mut Context<'_>, chunk: &mut [u8]) -> Poll<io::Result<bool>> {
        let n = match self.socket.poll_read(cx, chunk) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Ok(false)),
            Poll::Ready(Ok(n)) => n,
            other => return other.map_ok(|_| false),
        };
        self.socket.acknowledge_now();
        self.count_read(n);
        if self.rare.partial().is_empty() {
            let used = self.consume(&chunk[..n]);
            if used < n && !self.read_ended {
                self.rare.parts().partial.extend_from_slice(&chunk[used..n]);
            }
        } else {
            self.rare.parts().partial.extend_from_slice(&chunk[..n]);
            let _ = self.consume_partial();
        }
        Poll::Ready(Ok(true))
    }

    /// Feeds the packets in `partial` that have fully arrived to the core,
    /// keeping the rest; an emptied buffer is given back. Whether any was.
    fn consume_partial(&mut self) -> bool {
        let mut partial = self.rare.take_partial();
        let used = self.consume(&partial);
        if used == partial.len() || self.read_ended {
            return used > 0;
        }
        partial.drain(..used);
        self.rare.parts().partial = partial;
        used > 0
    }

    /// What the client is owed and has not taken: its outbox's unwritten
    /// bytes and the replies the core has yet to write it.
    fn backlog_bytes(&self) -> usize {
        let unwritten = self.outbox.borrow().unwritten_bytes();
        let owed = self.shared.borrow().broker.owed_reply_bytes(self.key);
        unwritten.saturating_add(usize::try_from(owed).unwrap_or(usize::MAX))
    }

    /// Whether the client's next packet is taken now: not while what it is
    /// owed is at its bound - every reply it could ask for would add to it
    /// - nor while the core holds its packets behind a session write.
    fn takes_packet(&mut self) -> bool {
        if self.shared.borrow().broker.holds_packets(self.key) {
            return false;
        }
        let backlog = self.backlog_bytes();
        if backlog >= OUTBOX_PAUSE_BYTES {
            self.pause_reading(backlog);
            return false;
        }
        true
    }

    /// Stops reading from the client until it has taken half of what it
    /// is owed.
    fn pause_reading(&mut self, backlog: usize) {
        if std::mem::replace(&mut self.reading_paused, true) {
            return;
        }
        let shared = self.shared.borrow();
        limited!(
            READING_PAUSED,
            shared.now_ms(),
            "client {} is owed {backlog} bytes it has not read, at the bound of {OUTBOX_PAUSE_BYTES}: nothing more is read from it until it reads half",
            shared.broker.client_id_of(self.key)
        );
    }

    /// Feeds each packet in `bytes` that has fully arrived to the core, in
    /// order, and returns how many bytes they took. Stops at a CONNECT
    /// whose password is to be checked off the executor, and before a
    /// packet the client may not have taken yet (`takes_packet`).
    fn consume(&mut self, bytes: &[u8]) -> usize {
        let (shared, key) = (&Rc::clone(&self.shared), self.key);
        // One clock read for every packet of this read: they arrived together.
        let now_ms = shared.borrow().now_ms();
        let mut consumed = 0;
        while !self.read_ended {
            let pending = &bytes[consumed..];
            let (read_header, limit_bytes) = {
                let state = shared.borrow();
                // Before its CONNECT is read, a connection is refused on the
                // first byte that is not a CONNECT's, not on what it declares.
                let read_header = match state.broker.version(key) {
                    None => decode_first_header,
                    Some(_) => decode_fixed_header,
                };
                (read_header, state.broker.inbound_limit_bytes(key) as usize)
            };
            let header = match read_header(pending) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(error) => {
                    fail(shared, key, error, None);
                    self.read_ended = true;
                    break;
                }
            };
            if header.packet_len() > limit_bytes {
                // Refused on its declared length: the body is never read.
                let version =
                    connect_version_hint(header.packet_type, &pending[header.header_len..]);
                fail(shared, key, TOO_LARGE, version);
                self.read_ended = true;
                break;
            }
            if pending.len() < header.packet_len() || !self.takes_packet() {
                break;
            }
            let body = &pending[header.header_len..header.packet_len()];
            if header.packet_type == PacketType::Connect as u8
                && !std::mem::take(&mut self.connect_checked)
            {
                if let Some(check) = credential_check(shared, key, &header, body) {
                    self.rare.parts().check = Some(check);
                    break;
                }
            }
            consumed += header.packet_len();
            if !dispatch(shared, key, &header, body, now_ms) {
                self.read_ended = true;
            }
        }
        consumed
    }

    /// The connection is over: the core hears of it, and its outbox goes.
    fn finish(&mut self) {
        self.outbox.borrow_mut().mark_dead();
        let mut guard = self.shared.borrow_mut();
        let shared = &mut *guard;
        let now_ms = shared.now_ms();
        shared
            .broker
            .handle_connection_lost(self.key, now_ms, &mut shared.outboxes);
        shared.outboxes.remove(self.key);
    }
}

/// Feeds one decoded packet, or the error that stopped decoding it, to the
/// core. Returns whether the connection is still open.
fn dispatch(shared: &SharedRef, key: Key, header: &FixedHeader, body: &[u8], now_ms: u64) -> bool {
    let mut guard = shared.borrow_mut();
    let shared = &mut *guard;
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

/// The check of a CONNECT's password off the executor, handing the core
/// its verdict, where checking it takes a hash; `None` where it does not.
fn credential_check(
    shared: &SharedRef,
    key: Key,
    header: &FixedHeader,
    body: &[u8],
) -> Option<Pin<Box<dyn Future<Output = ()>>>> {
    let Ok(Packet::Connect(connect)) = decode_packet(header, body, None) else {
        return None;
    };
    let state = shared.borrow();
    let door = state.broker.credential_door(key)?;
    let authentication = state.broker.authentication();
    if !authentication.computes_hash(door, connect.username.as_deref()) {
        return None;
    }
    let authentication = Arc::clone(authentication);
    let shared = shared.clone();
    Some(Box::pin(async move {
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
    }))
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

async fn sleep_ms(duration_ms: u64) {
    smol::Timer::after(Duration::from_millis(duration_ms)).await;
}

/// Answers a socket that found every connection slot taken: once the
/// opening bytes of its CONNECT say which version it speaks, it is told
/// Server Busy in that version's words, then closed.
pub async fn refuse_busy(mut stream: Box<dyn Duplex>, wait_ms: u64) {
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
    stream.shutdown();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an idle connection costs the executor beyond the socket's own
    /// registration: this future, inline in its task. Every wait it makes
    /// is on the socket, the outbox or a boxed rarity, so it must not grow
    /// with them.
    const MAX_CONNECTION_TASK_BYTES: usize = 56;

    #[test]
    fn the_connection_future_stays_small() {
        let size_bytes = std::mem::size_of::<Connection>();
        assert!(
            size_bytes <= MAX_CONNECTION_TASK_BYTES,
            "a connection's future is {size_bytes} B, over {MAX_CONNECTION_TASK_BYTES} B"
        );
    }

    #[test]
    fn the_rare_box_lasts_only_while_something_in_it_is_used() {
        let mut rare = Rare::default();
        rare.tidy();
        assert!(rare.0.is_none(), "an idle connection holds no box");
        rare.parts().partial.extend_from_slice(&[0x30, 2]);
        rare.tidy();
        assert_eq!(rare.partial(), [0x30, 2], "a split packet keeps it");
        assert_eq!(rare.take_partial(), [0x30, 2]);
        rare.tidy();
        assert!(rare.0.is_none(), "freed once the split packet is whole");
        rare.deadline(1_000);
        rare.tidy();
        assert!(rare.0.is_some(), "a stalled write's deadline keeps it");
        rare.disarm();
        rare.tidy();
        assert!(rare.0.is_none(), "freed once the write moves");
    }
}
