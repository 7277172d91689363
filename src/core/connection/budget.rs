//! How fast each client may publish: a token bucket per client id for
//! `publish_rate` and `publish_bytes`. The budget is the client id's, so
//! reconnecting does not refill it.

use std::collections::HashMap;

use crate::core::refusal::Refusal;

#[derive(Debug, Clone, Copy)]
struct Budget {
    messages: f64,
    bytes: f64,
    /// What it refills to: the client's own bounds where it has them.
    capacity_messages: f64,
    capacity_bytes: f64,
    updated_ms: u64,
}

/// The buckets of the clients that have spent some of theirs.
pub(crate) struct PublishBudgets {
    /// Messages and bytes a bucket holds when full, and refills per second;
    /// infinite where no limit is set.
    capacity_messages: f64,
    capacity_bytes: f64,
    limited: bool,
    by_client: HashMap<Box<str>, Budget>,
}

impl PublishBudgets {
    pub fn new(rate_per_s: Option<u32>, bytes_per_s: Option<u64>) -> PublishBudgets {
        PublishBudgets {
            capacity_messages: rate_per_s.map_or(f64::INFINITY, f64::from),
            capacity_bytes: bytes_per_s.map_or(f64::INFINITY, |b| b as f64),
            limited: rate_per_s.is_some() || bytes_per_s.is_some(),
            by_client: HashMap::new(),
        }
    }

    /// Whether a broker-wide `publish_rate` or `publish_bytes` is set.
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    /// Spends one message of `payload_bytes` from `client_id`'s bucket, or
    /// refuses it when the bucket is empty.
    pub fn spend(
        &mut self,
        client_id: &str,
        payload_bytes: usize,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let bounds = self
            .limited
            .then_some((self.capacity_messages, self.capacity_bytes));
        self.spend_within(client_id, payload_bytes, bounds, now_ms)
    }

    /// [`spend`](Self::spend) under bounds of the client's own, in
    /// messages and bytes per second (`None` for none): a reload may change
    /// them, and the bucket refills to what is in force now.
    pub fn spend_own(
        &mut self,
        client_id: &str,
        payload_bytes: usize,
        rate_per_s: Option<u32>,
        bytes_per_s: Option<u64>,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let bounds = (rate_per_s.is_some() || bytes_per_s.is_some()).then(|| {
            (
                rate_per_s.map_or(f64::INFINITY, f64::from),
                bytes_per_s.map_or(f64::INFINITY, |b| b as f64),
            )
        });
        self.spend_within(client_id, payload_bytes, bounds, now_ms)
    }

    fn spend_within(
        &mut self,
        client_id: &str,
        payload_bytes: usize,
        bounds: Option<(f64, f64)>,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let Some((capacity_messages, capacity_bytes)) = bounds else {
            return Ok(());
        };
        let budget = self.by_client.entry(client_id.into()).or_insert(Budget {
            messages: capacity_messages,
            bytes: capacity_bytes,
            capacity_messages,
            capacity_bytes,
            updated_ms: now_ms,
        });
        budget.capacity_messages = capacity_messages;
        budget.capacity_bytes = capacity_bytes;
        let elapsed_s = now_ms.saturating_sub(budget.updated_ms) as f64 / 1000.0;
        budget.updated_ms = now_ms;
        budget.messages = (budget.messages + elapsed_s * capacity_messages).min(capacity_messages);
        budget.bytes = (budget.bytes + elapsed_s * capacity_bytes).min(capacity_bytes);
        // A message larger than a whole second's bytes is let through into
        // deficit, so the byte rate never becomes a ban on large messages.
        if budget.messages < 1.0 || budget.bytes <= 0.0 {
            return Err(Refusal::PublishRateExceeded);
        }
        budget.messages -= 1.0;
        budget.bytes -= payload_bytes as f64;
        debug_assert!(budget.messages >= 0.0 && budget.messages < capacity_messages);
        Ok(())
    }

    /// Drops the buckets that have refilled: such a client lost nothing,
    /// and the table holds only clients publishing near their limit.
    pub fn forget_full(&mut self, now_ms: u64) {
        self.by_client.retain(|_, budget| {
            let elapsed_s = now_ms.saturating_sub(budget.updated_ms) as f64 / 1000.0;
            let (messages, bytes) = (budget.capacity_messages, budget.capacity_bytes);
            budget.messages + elapsed_s * messages < messages
                || budget.bytes + elapsed_s * bytes < bytes
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_empties_refills_and_is_forgotten_once_full() {
        let mut budgets = PublishBudgets::new(Some(2), None);
        assert_eq!(budgets.spend("a", 10, 0), Ok(()));
        assert_eq!(budgets.spend("a", 10, 0), Ok(()));
        assert_eq!(budgets.spend("a", 10, 0), Err(Refusal::PublishRateExceeded));
        // Another client's bucket is its own.
        assert_eq!(budgets.spend("b", 10, 0), Ok(()));
        // Half a second refills one message.
        assert_eq!(budgets.spend("a", 10, 500), Ok(()));
        // By then "b" has refilled, and "a" has spent what came back.
        budgets.forget_full(500);
        assert_eq!(
            budgets.by_client.keys().map(|k| &**k).collect::<Vec<_>>(),
            ["a"]
        );
        budgets.forget_full(10_000);
        assert!(budgets.by_client.is_empty());
    }

    #[test]
    fn no_limit_keeps_no_bucket() {
        let mut budgets = PublishBudgets::new(None, None);
        for _ in 0..1000 {
            assert_eq!(budgets.spend("a", 1 << 20, 0), Ok(()));
        }
        assert!(budgets.by_client.is_empty());
    }
}
