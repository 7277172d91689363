//! What the core has decided to send to one connection, waiting for the
//! future that serves that connection to write it.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::codec::{encode, Packet, ProtocolVersion};
use crate::core::{Key, StoreRequest, Transport};
use crate::store::{StorageHandle, Ticket};

#[derive(Default)]
pub struct OutboxState {
    /// Encoded packets, the first `written` bytes of them already handed
    /// to the socket.
    pub bytes: Vec<u8>,
    /// A `u32` keeps the shared outbox in a smaller malloc size class: an
    /// outbox never holds near 4 GiB (reading pauses past 256 KiB, and
    /// a connection's deliveries are windowed or shed).
    written: u32,
    /// The core ended the connection: flush, then close.
    pub closing: bool,
    /// The socket is gone; nothing more is written or read.
    pub dead: bool,
    /// The task serving the connection, while it waits.
    waker: Option<Waker>,
}

pub type Outbox = Rc<RefCell<OutboxState>>;

/// A written-out outbox smaller than this is given back, so that a quiet
/// connection keeps no write buffer between its packets; a larger one is
/// kept for the next burst, up to this many bytes.
const IDLE_WRITE_BYTES: usize = 256;
const MAX_KEPT_WRITE_BYTES: usize = 256 * 1024;

impl OutboxState {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    pub fn set_waker(&mut self, waker: &Waker) {
        match &self.waker {
            Some(current) if current.will_wake(waker) => {}
            _ => self.waker = Some(waker.clone()),
        }
    }

    pub fn forget_waker(&mut self) {
        self.waker = None;
    }

    pub fn mark_dead(&mut self) {
        self.dead = true;
        self.wake();
    }

    /// Bytes queued and not yet handed to the socket.
    pub fn unwritten_bytes(&self) -> usize {
        self.bytes.len() - self.written as usize
    }

    /// What is queued and not yet handed to the socket.
    pub fn unwritten(&self) -> &[u8] {
        &self.bytes[self.written as usize..]
    }

    /// The socket took the first `n` unwritten bytes.
    pub fn took(&mut self, n: usize) {
        debug_assert!(n <= self.unwritten_bytes());
        self.written += u32::try_from(n).expect("an outbox holds under 4 GiB");
    }

    /// The socket has taken everything.
    pub fn drained(&mut self) {
        let burst_bytes = self.bytes.len();
        self.bytes.clear();
        self.written = 0;
        if burst_bytes < IDLE_WRITE_BYTES || self.bytes.capacity() > MAX_KEPT_WRITE_BYTES {
            self.bytes = Vec::new();
        }
    }

    /// Drops what the socket has taken once it is at least half the
    /// buffer, so a socket that keeps taking a little never lets the
    /// buffer grow by what it already took.
    pub fn compact(&mut self) {
        let written = self.written as usize;
        if written > 0 && written * 2 >= self.bytes.len() {
            self.bytes.drain(..written);
            self.written = 0;
        }
    }
}

/// Waits until there is something to write or the connection is closing.
pub async fn writable(outbox: &Outbox) {
    poll_fn(|cx| {
        let mut state = outbox.borrow_mut();
        if !state.bytes.is_empty() || state.closing || state.dead {
            Poll::Ready(())
        } else {
            state.set_waker(cx.waker());
            Poll::Pending
        }
    })
    .await
}

/// The connections' outboxes, indexed as the core's connection table is,
/// and the storage threads: everything the core's answers go out through.
pub struct Outboxes {
    entries: Vec<Option<(Key, Outbox)>>,
    /// Unwritten bytes past which a droppable packet is shed.
    pub droppable_limit_bytes: usize,
    /// One per provider, in configuration order.
    pub storage: Vec<StorageHandle>,
}

impl Outboxes {
    pub fn new(max_connections: usize, droppable_limit_bytes: usize) -> Outboxes {
        let mut entries = Vec::with_capacity(max_connections);
        entries.resize_with(max_connections, || None);
        Outboxes {
            entries,
            droppable_limit_bytes,
            storage: Vec::new(),
        }
    }

    pub fn insert(&mut self, key: Key) -> Outbox {
        let outbox = Outbox::default();
        self.entries[key.index as usize] = Some((key, Rc::clone(&outbox)));
        outbox
    }

    pub fn remove(&mut self, key: Key) {
        let slot = &mut self.entries[key.index as usize];
        if slot.as_ref().is_some_and(|(k, _)| *k == key) {
            *slot = None;
        }
    }

    fn get(&self, key: Key) -> Option<&Outbox> {
        match self.entries.get(key.index as usize)? {
            Some((k, outbox)) if *k == key => Some(outbox),
            _ => None,
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &Outbox> {
        self.entries.iter().flatten().map(|(_, outbox)| outbox)
    }
}

impl Transport for Outboxes {
    fn send(
        &mut self,
        conn: Key,
        version: ProtocolVersion,
        packet: &Packet,
        droppable: bool,
    ) -> bool {
        let Some(outbox) = self.get(conn) else {
            return false;
        };
        let mut state = outbox.borrow_mut();
        if state.closing || state.dead {
            return false;
        }
        if droppable && state.unwritten_bytes() >= self.droppable_limit_bytes {
            return false;
        }
        if state.bytes.capacity() == 0 {
            // A burst's first packet: room for the acknowledgements that
            // usually follow it, instead of a regrowth every few of them.
            state.bytes.reserve(IDLE_WRITE_BYTES);
        }
        encode(packet, version, &mut state.bytes);
        state.wake();
        true
    }

    fn store(&mut self, provider: usize, request: StoreRequest) -> bool {
        let Some(handle) = self.storage.get(provider) else {
            return false;
        };
        let submitted = match request {
            StoreRequest::Commit { ticket, writes } => handle.try_commit(Ticket(ticket), writes),
            StoreRequest::Read {
                ticket,
                channel,
                from_offset,
                limit,
            } => handle.try_read(Ticket(ticket), channel, from_offset, limit),
            StoreRequest::FirstAtOrAfter {
                ticket,
                channel,
                at_unix_ms,
            } => handle.try_first_at_or_after(Ticket(ticket), channel, at_unix_ms),
            StoreRequest::Position {
                ticket,
                channel,
                reader,
            } => handle.try_position(Ticket(ticket), channel, reader),
        };
        submitted.is_ok()
    }

    fn close(&mut self, conn: Key) {
        if let Some(outbox) = self.get(conn) {
            let mut state = outbox.borrow_mut();
            state.closing = true;
            state.wake();
        }
        self.remove(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outbox's allocation (`Rc` counts, `RefCell` flag, state): 72 B
    /// is a 80 B malloc chunk, where 80 B would take 96.
    const MAX_OUTBOX_ALLOCATION_BYTES: usize = 72;

    #[test]
    fn an_outbox_stays_in_its_malloc_size_class() {
        let size_bytes =
            2 * std::mem::size_of::<usize>() + std::mem::size_of::<RefCell<OutboxState>>();
        assert!(
            size_bytes <= MAX_OUTBOX_ALLOCATION_BYTES,
            "an outbox takes {size_bytes} B, over {MAX_OUTBOX_ALLOCATION_BYTES} B"
        );
    }

    #[test]
    fn a_small_written_out_buffer_is_given_back_and_a_large_one_kept() {
        let mut outbox = OutboxState::default();
        outbox.bytes.extend_from_slice(&[1; 4]);
        outbox.written = 4;
        outbox.drained();
        assert_eq!((outbox.bytes.capacity(), outbox.written), (0, 0));

        outbox.bytes.extend_from_slice(&[1; 4096]);
        outbox.written = 4096;
        outbox.drained();
        assert!(outbox.bytes.is_empty() && outbox.bytes.capacity() >= 4096);
    }

    #[test]
    fn what_the_socket_took_is_dropped_once_it_is_half_the_buffer() {
        let mut outbox = OutboxState::default();
        outbox.bytes.extend(0..10u8);
        outbox.written = 4;
        outbox.compact();
        assert_eq!((outbox.bytes.len(), outbox.unwritten_bytes()), (10, 6));
        outbox.written = 5;
        outbox.compact();
        assert_eq!(outbox.bytes, [5, 6, 7, 8, 9]);
        assert_eq!(outbox.written, 0);
    }
}
