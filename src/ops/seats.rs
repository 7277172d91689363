//! The operations listener's connection tables: who holds a seat, and
//! who gives it up when a newcomer finds none free.
//!
//! A table holds at most `capacity` connections. A connection is either
//! waiting for a request (from its accept through its TLS handshake,
//! PROXY header and first head, or idle since its last answer) or being
//! answered. A newcomer finding the table full takes the seat of the one
//! that has waited longest, which is told to close: idle and slow callers
//! lose their place first, and one being answered never does. The
//! listener keeps two tables ([`Tables`]): everything is served at the
//! first, `/health` alone at the second, which a newcomer reaches only
//! when every seat at the first is being answered.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

/// What a connection is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every route, up to [`super::http::MAX_REQUESTS_PER_CONNECTION`]
    /// requests.
    Everything,
    /// `/health`, once; any other route is answered `429`.
    HealthOnly,
}

/// The two tables a connection may take a seat at.
pub struct Tables {
    everything: Rc<Table>,
    health_only: Rc<Table>,
}

impl Tables {
    pub fn new(max_connections: usize) -> Tables {
        Tables {
            everything: Table::new(max_connections),
            health_only: Table::new(max_connections),
        }
    }

    /// A seat for a newcomer, and what it is served there; `None` when
    /// both tables are full of connections being answered.
    pub fn seat(&self) -> Option<(Held, Scope)> {
        if let Some(held) = self.everything.take() {
            return Some((held, Scope::Everything));
        }
        self.health_only
            .take()
            .map(|held| (held, Scope::HealthOnly))
    }
}

/// At most `capacity` connections at once. A seat whose connection waits
/// for a request is given to a newcomer when none is free, the one that
/// has waited longest first; the connection it leaves is told to close,
/// and at most `capacity` such wait to be gone.
struct Table {
    capacity: usize,
    seats: RefCell<Vec<Rc<Seat>>>,
    closing: Cell<usize>,
}

impl Table {
    fn new(capacity: usize) -> Rc<Table> {
        Rc::new(Table {
            capacity,
            seats: RefCell::new(Vec::with_capacity(capacity)),
            closing: Cell::new(0),
        })
    }

    fn take(self: &Rc<Table>) -> Option<Held> {
        let mut seats = self.seats.borrow_mut();
        if seats.len() >= self.capacity {
            if self.closing.get() >= self.capacity {
                return None;
            }
            let (_, longest) = seats
                .iter()
                .enumerate()
                .filter_map(|(at, seat)| Some((seat.waiting_since.get()?, at)))
                .min()?;
            // `remove` keeps the seats in the order they were taken, so
            // of two that began waiting in the same instant the older goes.
            seats.remove(longest).evict();
            self.closing.set(self.closing.get() + 1);
        }
        let seat = Rc::new(Seat::default());
        seats.push(seat.clone());
        Some(Held {
            table: self.clone(),
            seat,
        })
    }
}

/// A connection's place at a table, as the table sees it.
pub struct Seat {
    /// Since when the connection has waited for a request: since it was
    /// accepted, or since its last answer. `None` while one is answered.
    waiting_since: Cell<Option<Instant>>,
    evicted: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Default for Seat {
    fn default() -> Seat {
        Seat {
            waiting_since: Cell::new(Some(Instant::now())),
            evicted: Cell::new(false),
            waker: Cell::new(None),
        }
    }
}

impl Seat {
    /// Marks the connection waiting for a request, from now unless it
    /// already was.
    pub fn waiting(&self) {
        if self.waiting_since.get().is_none() {
            self.waiting_since.set(Some(Instant::now()));
        }
    }

    /// Marks the connection answering a request: nobody may take its seat.
    pub fn answering(&self) {
        self.waiting_since.set(None);
    }

    fn evict(&self) {
        self.evicted.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// `future`'s output, or `None` once the seat is given to a newcomer.
    pub async fn unless_evicted<T>(&self, future: impl Future<Output = T>) -> Option<T> {
        let evicted = std::future::poll_fn(|cx| {
            if self.evicted.get() {
                return Poll::Ready(None);
            }
            self.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        });
        smol::future::or(async { Some(future.await) }, evicted).await
    }
}

/// A seat held by a connection's task, given back when the task ends.
pub struct Held {
    table: Rc<Table>,
    pub seat: Rc<Seat>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.seat.evicted.get() {
            self.table.closing.set(self.table.closing.get() - 1);
        } else {
            let mut seats = self.table.seats.borrow_mut();
            seats.retain(|seat| !Rc::ptr_eq(seat, &self.seat));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_gives_away_the_longest_waiting_seat_and_never_one_answering() {
        let tables = Tables::new(2);
        let (a, scope) = tables.seat().unwrap();
        assert_eq!(scope, Scope::Everything);
        let (b, _) = tables.seat().unwrap();
        a.seat.answering();
        let (c, scope) = tables.seat().unwrap();
        assert_eq!(scope, Scope::Everything);
        assert!(b.seat.evicted.get(), "the one waiting made room");
        assert!(!a.seat.evicted.get(), "the one answering kept its seat");
        c.seat.answering();
        // Every seat answering: /health alone, at the second table.
        let (d, scope) = tables.seat().unwrap();
        assert_eq!(scope, Scope::HealthOnly);
        let (_e, _) = tables.seat().unwrap();
        let (_f, scope) = tables.seat().unwrap();
        assert_eq!(scope, Scope::HealthOnly);
        assert!(
            d.seat.evicted.get(),
            "the longest waiting at the second table"
        );
        // A seat given back is free again, and takes nobody's place.
        drop(a);
        let (_g, scope) = tables.seat().unwrap();
        assert_eq!(scope, Scope::Everything);
        assert!(!c.seat.evicted.get());
        drop(b);
        assert_eq!(tables.everything.closing.get(), 0);
    }

    #[test]
    fn no_more_connections_wait_to_close_than_a_table_seats() {
        let tables = Tables::new(1);
        let mut evicted = Vec::new();
        let (mut last, _) = tables.seat().unwrap();
        // Each newcomer evicts the one before, until one closing per seat
        // at each table is still to go.
        for _ in 0..3 {
            let (next, _) = tables.seat().unwrap();
            evicted.push(std::mem::replace(&mut last, next));
        }
        assert_eq!(tables.everything.closing.get(), 1);
        assert_eq!(tables.health_only.closing.get(), 1);
        assert!(tables.seat().is_none(), "both closing budgets are spent");
        evicted.clear();
        assert!(tables.seat().is_some(), "gone, they make room again");
    }

    #[test]
    fn a_wait_ends_when_its_seat_is_given_away() {
        let tables = Tables::new(1);
        let (held, _) = tables.seat().unwrap();
        smol::block_on(async {
            let mut wait = Box::pin(held.seat.unless_evicted(smol::future::pending::<()>()));
            assert!(smol::future::poll_once(&mut wait).await.is_none());
            let _newcomer = tables.seat().unwrap();
            assert_eq!(wait.await, None);
        });
        let done = smol::block_on(Seat::default().unless_evicted(async { 7 }));
        assert_eq!(done, Some(7));
    }
}
