//! What the core has decided to send to one connection, waiting for that
//! connection's writer task.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::codec::{encode, Packet, ProtocolVersion};
use crate::core::{Key, StoreRequest, Transport};
use crate::store::{StorageHandle, Ticket};

#[derive(Default)]
pub struct OutboxState {
    /// Encoded packets not yet handed to the socket.
    pub bytes: Vec<u8>,
    /// The core ended the connection: flush, then close.
    pub closing: bool,
    /// The socket is gone; nothing more is written or read.
    pub dead: bool,
    writer: Option<Waker>,
    reader: Option<Waker>,
    /// The reader waits for the outbox to drain, not only for a close: a
    /// write wakes it only then, since waking a reader that is waiting on
    /// its socket costs a wasted read and an epoll re-arm.
    pub reader_paused: bool,
}

pub type Outbox = Rc<RefCell<OutboxState>>;

impl OutboxState {
    fn wake_writer(&mut self) {
        if let Some(waker) = self.writer.take() {
            waker.wake();
        }
    }

    pub fn wake_reader(&mut self) {
        if let Some(waker) = self.reader.take() {
            waker.wake();
        }
    }

    pub fn mark_dead(&mut self) {
        self.dead = true;
        self.wake_writer();
        self.wake_reader();
    }
}

/// Waits until there is something to write or the connection is closing.
pub async fn writable(outbox: &Outbox) {
    poll_fn(|cx| {
        let mut state = outbox.borrow_mut();
        if !state.bytes.is_empty() || state.closing || state.dead {
            Poll::Ready(())
        } else {
            state.writer = Some(cx.waker().clone());
            Poll::Pending
        }
    })
    .await
}

/// Resolves once the connection is closing or dead, or, with
/// `drained_below`, once the unwritten bytes fall under that many.
pub async fn reader_may_continue(outbox: &Outbox, drained_below: Option<usize>) {
    poll_fn(|cx| {
        let mut state = outbox.borrow_mut();
        let drained = drained_below.is_some_and(|limit| state.bytes.len() < limit);
        if state.closing || state.dead || drained {
            state.reader_paused = false;
            Poll::Ready(())
        } else {
            state.reader = Some(cx.waker().clone());
            state.reader_paused = drained_below.is_some();
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
        if droppable && state.bytes.len() >= self.droppable_limit_bytes {
            return false;
        }
        encode(packet, version, &mut state.bytes);
        state.wake_writer();
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
            state.wake_writer();
            state.wake_reader();
        }
        self.remove(conn);
    }
}
