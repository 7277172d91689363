//! A provider's byte bound with its reserve: one counter, shared by every
//! channel on the provider, that appends may fill only up to the reserve
//! and relieving writes (positions now; acknowledgements and dead-letter
//! moves later) may fill to the bound itself.

use super::types::Usage;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    pub(crate) max_bytes: u64,
    pub(crate) reserve_bytes: u64,
    pub(crate) used_bytes: u64,
}

impl Budget {
    pub(crate) fn new(max_bytes: u64, reserve_bytes: u64) -> Self {
        Budget {
            max_bytes,
            reserve_bytes,
            used_bytes: 0,
        }
    }

    /// Whether an append of `size_bytes` stays out of the reserve.
    pub(crate) fn admits_append(&self, size_bytes: u64) -> bool {
        let limit = self.max_bytes.saturating_sub(self.reserve_bytes);
        self.used_bytes
            .checked_add(size_bytes)
            .is_some_and(|after| after <= limit)
    }

    /// Whether a relieving write of `size_bytes` fits under the bound.
    pub(crate) fn admits_relief(&self, size_bytes: u64) -> bool {
        self.used_bytes
            .checked_add(size_bytes)
            .is_some_and(|after| after <= self.max_bytes)
    }

    pub(crate) fn charge(&mut self, size_bytes: u64) {
        self.used_bytes = self.used_bytes.saturating_add(size_bytes);
    }

    pub(crate) fn release(&mut self, size_bytes: u64) {
        debug_assert!(size_bytes <= self.used_bytes, "released more than charged");
        self.used_bytes = self.used_bytes.saturating_sub(size_bytes);
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage {
            max_bytes: self.max_bytes,
            reserve_bytes: self.reserve_bytes,
            used_bytes: self.used_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn appends_stop_at_the_reserve_and_relief_at_the_bound() {
        let mut b = Budget::new(100, 30);
        assert!(b.admits_append(70));
        assert!(!b.admits_append(71));
        b.charge(70);
        assert!(!b.admits_append(1));
        assert!(b.admits_relief(30));
        assert!(!b.admits_relief(31));
        b.release(70);
        assert_eq!(b.used_bytes, 0);
        // A reserve larger than the bound leaves appends nothing.
        assert!(!Budget::new(10, 20).admits_append(1));
        assert!(!b.admits_append(u64::MAX));
    }
}
