//! What the soak's clients were promised and what they were given: the
//! ids of acknowledged records, the ids each reader was delivered, and
//! counts of what went wrong on the way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Bytes of every payload the mix publishes: a record's id in sixteen hex
/// digits, then padding.
pub const PAYLOAD_BYTES: usize = 64;
const ID_DIGITS: usize = 16;

/// `id` as a payload.
pub fn payload(id: u64) -> Vec<u8> {
    let mut bytes = format!("{id:016x}").into_bytes();
    bytes.resize(PAYLOAD_BYTES, b'.');
    bytes
}

/// The id a payload carries, if it is one of ours.
pub fn payload_id(payload: &[u8]) -> Option<u64> {
    let digits = std::str::from_utf8(payload.get(..ID_DIGITS)?).ok()?;
    u64::from_str_radix(digits, 16).ok()
}

/// A set of ids handed out densely from 1: one bit each.
#[derive(Default)]
pub struct IdSet {
    words: Mutex<Vec<u64>>,
    count: AtomicU64,
}

impl IdSet {
    pub fn insert(&self, id: u64) {
        let (word, bit) = ((id / 64) as usize, id % 64);
        let mut words = self.words.lock().expect("id set");
        if words.len() <= word {
            words.resize(word + 1, 0);
        }
        if words[word] & (1 << bit) == 0 {
            words[word] |= 1 << bit;
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many distinct ids are in the set.
    pub fn len(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The ids in this set that none of `others` holds, the first `limit`
    /// of them, and how many there are in all.
    pub fn missing_from(&self, others: &[&IdSet], limit: usize) -> (u64, Vec<u64>) {
        let mine = self.words.lock().expect("id set").clone();
        let theirs: Vec<Vec<u64>> = others
            .iter()
            .map(|set| set.words.lock().expect("id set").clone())
            .collect();
        let (mut total, mut first) = (0u64, Vec::new());
        for (index, word) in mine.iter().enumerate() {
            let covered = theirs.iter().fold(0u64, |acc, other| {
                acc | other.get(index).copied().unwrap_or(0)
            });
            let missing = word & !covered;
            total += u64::from(missing.count_ones());
            for bit in 0..64 {
                if missing & (1 << bit) != 0 && first.len() < limit {
                    first.push(index as u64 * 64 + bit);
                }
            }
        }
        (total, first)
    }
}

/// Everything the actors record.
pub struct Ledger {
    next_event_id: AtomicU64,
    next_job_id: AtomicU64,
    /// Append records PUBACKed to their publisher.
    pub events_acked: IdSet,
    /// Queue jobs PUBACKed to their publisher.
    pub jobs_acked: IdSet,
    /// The highest acknowledged state sequence number of each sensor
    /// (0: none yet).
    state_acked: Mutex<Vec<u64>>,
    /// What the consumer that is always there was delivered.
    pub live_consumer: IdSet,
    /// What the consumer that is away half the time was delivered.
    pub away_consumer: IdSet,
    /// What a subscriber at the upstream mosquitto was delivered.
    pub upstream: IdSet,
    /// Jobs a worker answered `ack` whose answer was PUBACKed.
    pub jobs_done: IdSet,
    /// Jobs that reached the dead-letter channel.
    pub dead_letters: IdSet,
    pub counts: Counts,
}

impl Ledger {
    pub fn new(sensors: usize) -> Ledger {
        Ledger {
            next_event_id: AtomicU64::new(1),
            next_job_id: AtomicU64::new(1),
            events_acked: IdSet::default(),
            jobs_acked: IdSet::default(),
            state_acked: Mutex::new(vec![0; sensors]),
            live_consumer: IdSet::default(),
            away_consumer: IdSet::default(),
            upstream: IdSet::default(),
            jobs_done: IdSet::default(),
            dead_letters: IdSet::default(),
            counts: Counts::default(),
        }
    }

    pub fn next_event_id(&self) -> u64 {
        self.next_event_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn next_job_id(&self) -> u64 {
        self.next_job_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn state_acked(&self, sensor: usize, sequence: u64) {
        let mut states = self.state_acked.lock().expect("states");
        states[sensor] = states[sensor].max(sequence);
    }

    /// Each sensor's highest acknowledged state sequence number.
    pub fn acked_states(&self) -> Vec<u64> {
        self.state_acked.lock().expect("states").clone()
    }
}

/// Counts of events along the way, for the summary and the CSV.
#[derive(Default)]
pub struct Counts {
    pub publishes: AtomicU64,
    /// A PUBACK with a code other than success.
    pub refusals: AtomicU64,
    /// Connections the mix ended on purpose and opened again.
    pub reconnects: AtomicU64,
    /// Connections to the broker that failed or broke unasked.
    pub broker_errors: AtomicU64,
    /// The last of those, for the summary.
    pub last_broker_error: Mutex<String>,
    /// Durable sessions found gone (Session Present 0) on a reconnect.
    pub sessions_lost: AtomicU64,
    /// Times the upstream mosquitto was stopped and started again.
    pub outages: AtomicU64,
    pub jobs_returned: AtomicU64,
}

impl Counts {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn broker_error(&self, error: &str) {
        Counts::add(&self.broker_errors);
        *self.last_broker_error.lock().expect("error") = error.to_string();
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_carries_its_id() {
        let bytes = payload(0xdead_beef);
        assert_eq!(bytes.len(), PAYLOAD_BYTES);
        assert_eq!(payload_id(&bytes), Some(0xdead_beef));
        assert_eq!(payload_id(b"short"), None);
    }

    #[test]
    fn missing_ids_are_those_no_reader_holds() {
        let (acked, a, b) = (IdSet::default(), IdSet::default(), IdSet::default());
        for id in [1, 2, 3, 64, 65, 200] {
            acked.insert(id);
        }
        a.insert(1);
        a.insert(1);
        b.insert(64);
        b.insert(200);
        assert_eq!(a.len(), 1);
        assert_eq!(acked.missing_from(&[&a, &b], 10), (3, vec![2, 3, 65]));
        assert_eq!(acked.missing_from(&[&a, &b], 1), (3, vec![2]));
        assert_eq!(acked.missing_from(&[&acked], 10), (0, vec![]));
    }
}
