//! The arithmetic and the spellings of a queue, apart from its state: the
//! backoff gap, the offer tick, the Delivery ID, the topics a worker uses,
//! and when one filter lies inside another. Pure functions, so each is
//! tested against the tables in `rfcs/0005-queue.md` without a broker.

/// New work and waiting workers are looked at on this tick; a backoff is
/// honoured to within one.
pub const OFFER_TICK_MS: u64 = 200;

/// The most bytes a Delivery ID takes; clients echo it and never parse it.
pub const MAX_DELIVERY_ID_BYTES: usize = 32;

/// What a worker subscribes to, before the queue's name.
const FORM_PREFIX: &str = "$saguin/queue/";

/// `retry.backoff`: the shape of the gap between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    None,
    Linear,
    Exponential,
}

/// The gap after `attempts` attempts: none, `base × n`, or
/// `base × 2^(n-1)`. Saturates rather than wrapping: `max_attempts`
/// bounds `n`, and no gap is allowed to come round to zero.
pub fn backoff_gap_ms(backoff: Backoff, base_ms: u64, attempts: u32) -> u64 {
    match (backoff, attempts) {
        (Backoff::None, _) | (_, 0) => 0,
        (Backoff::Linear, n) => base_ms.saturating_mul(u64::from(n)),
        (Backoff::Exponential, n) => {
            let factor = 1u64.checked_shl(n - 1).filter(|_| n <= 63);
            factor.map_or(u64::MAX, |f| base_ms.saturating_mul(f))
        }
    }
}

/// When a job that came back may be offered again: the gap is measured
/// from `last_had_ms`, the moment its worker last had it, and rounded up
/// to the offer tick. A gap already served is no wait at all.
pub fn available_at_ms(last_had_ms: u64, gap_ms: u64) -> u64 {
    if gap_ms == 0 {
        return 0;
    }
    let due = last_had_ms.saturating_add(gap_ms);
    due.div_ceil(OFFER_TICK_MS).saturating_mul(OFFER_TICK_MS)
}

/// Whether a job received at `received_unix_ms` is older than
/// `job_expires_after`. A job with no time (0) never expires.
pub fn is_expired(received_unix_ms: u64, expires_after_ms: Option<u64>, now_unix_ms: u64) -> bool {
    match expires_after_ms {
        Some(after) if received_unix_ms != 0 => {
            now_unix_ms.saturating_sub(received_unix_ms) >= after
        }
        _ => false,
    }
}

/// One attempt's identity: the run it belongs to, a counter unique in the
/// run, and the job's offset. A run's nonce differs from the last run's,
/// so an ID handed out before a restart names nothing after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryId {
    pub run: u64,
    pub delivery: u64,
    pub offset: u64,
}

impl DeliveryId {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(24);
        bytes.extend_from_slice(&self.run.to_be_bytes());
        bytes.extend_from_slice(&self.delivery.to_be_bytes());
        bytes.extend_from_slice(&self.offset.to_be_bytes());
        bytes
    }

    /// `None` for anything this broker did not hand out.
    pub fn decode(bytes: &[u8]) -> Option<DeliveryId> {
        if bytes.len() != 24 {
            return None;
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_be_bytes(b)
        };
        Some(DeliveryId {
            run: word(0),
            delivery: word(1),
            offset: word(2),
        })
    }
}

/// The subscription form a worker uses for `queue`.
pub fn form(queue: &str) -> String {
    format!("{FORM_PREFIX}{queue}")
}

/// The topic a worker answers on.
pub fn response_topic(queue: &str) -> String {
    format!("{FORM_PREFIX}{queue}/response")
}

/// The queue a filter under `$saguin/queue/` names, if it is written as
/// exactly one plain level; `Some(Err(()))` for any other spelling there;
/// `None` for a filter outside that space.
pub fn form_name(filter: &str) -> Option<Result<&str, ()>> {
    let rest = filter.strip_prefix(FORM_PREFIX)?;
    let plain = !rest.is_empty() && !rest.contains(['/', '+', '#']);
    Some(if plain { Ok(rest) } else { Err(()) })
}

/// The queue a response topic names, for `$saguin/queue/<name>/response`.
pub fn response_name(topic: &str) -> Option<&str> {
    let name = topic.strip_prefix(FORM_PREFIX)?.strip_suffix("/response")?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// Whether every topic `inner` matches is matched by `outer`: `inner`
/// lies entirely inside `outer`. Both are valid MQTT filters.
pub fn filter_within(inner: &str, outer: &str) -> bool {
    let mut inner_levels = inner.split('/');
    let mut outer_levels = outer.split('/');
    loop {
        match (inner_levels.next(), outer_levels.next()) {
            (_, Some("#")) => return true,
            (None, None) => return true,
            // `a/#` matches `a` too, but `a` does not match `a/b`.
            (None, Some(_)) | (Some(_), None) => return false,
            (Some("#"), Some(_)) => return false,
            (Some(_), Some("+")) => {}
            (Some("+"), Some(_)) => return false,
            (Some(i), Some(o)) if i == o => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_after_n_attempts_follows_the_shape() {
        // The table in RFC 0005: 2s base.
        let linear: Vec<u64> = (1..=4)
            .map(|n| backoff_gap_ms(Backoff::Linear, 2_000, n))
            .collect();
        assert_eq!(linear, [2_000, 4_000, 6_000, 8_000]);
        let exponential: Vec<u64> = (1..=5)
            .map(|n| backoff_gap_ms(Backoff::Exponential, 2_000, n))
            .collect();
        assert_eq!(exponential, [2_000, 4_000, 8_000, 16_000, 32_000]);
        assert_eq!(backoff_gap_ms(Backoff::None, 2_000, 3), 0);
        assert_eq!(backoff_gap_ms(Backoff::Exponential, 2_000, 0), 0);
        // Five attempts at a 2s base wait 2+4+8+16 = 30s in all before the fifth.
        let total: u64 = (1..=4)
            .map(|n| backoff_gap_ms(Backoff::Exponential, 2_000, n))
            .sum();
        assert_eq!(total, 30_000);
        assert_eq!(
            backoff_gap_ms(Backoff::Exponential, 2_000, 200),
            u64::MAX,
            "saturates, never wraps"
        );
    }

    #[test]
    fn a_gap_is_rounded_up_to_the_tick_and_a_served_one_waits_nothing() {
        assert_eq!(available_at_ms(1_000, 0), 0);
        assert_eq!(available_at_ms(1_000, 2_000), 3_000);
        assert_eq!(available_at_ms(1_050, 2_000), 3_200);
        assert_eq!(available_at_ms(1_201, 2_000), 3_400);
        // Held for the whole visibility timeout (30s) at a 2s gap: due
        // long ago, so offered on the next tick.
        let leased_at = 10_000;
        let timed_out_at = leased_at + 30_000;
        assert!(available_at_ms(leased_at, 2_000) <= timed_out_at);
        // A gap longer than the timeout leaves the difference to wait.
        assert_eq!(available_at_ms(leased_at, 32_000), 42_000);
    }

    #[test]
    fn job_expiry_ignores_jobs_with_no_time() {
        assert!(!is_expired(0, Some(1_000), u64::MAX));
        assert!(!is_expired(5_000, None, u64::MAX));
        assert!(!is_expired(5_000, Some(1_000), 5_999));
        assert!(is_expired(5_000, Some(1_000), 6_000));
    }

    #[test]
    fn a_delivery_id_round_trips_within_32_bytes() {
        let id = DeliveryId {
            run: 7,
            delivery: u64::MAX,
            offset: 42,
        };
        let bytes = id.encode();
        assert!(bytes.len() <= MAX_DELIVERY_ID_BYTES);
        assert_eq!(DeliveryId::decode(&bytes), Some(id));
        assert_eq!(DeliveryId::decode(b"ack"), None);
    }

    #[test]
    fn the_form_and_response_topic_are_spelled_one_way() {
        assert_eq!(form_name("$saguin/queue/jobs"), Some(Ok("jobs")));
        for wrong in [
            "$saguin/queue/jobs/#",
            "$saguin/queue/jobs/w-7",
            "$saguin/queue/#",
            "$saguin/queue/+",
            "$saguin/queue/",
        ] {
            assert_eq!(form_name(wrong), Some(Err(())), "{wrong}");
        }
        assert_eq!(form_name("jobs/#"), None);
        assert_eq!(response_name("$saguin/queue/jobs/response"), Some("jobs"));
        assert_eq!(response_name("$saguin/queue/jobs"), None);
        assert_eq!(response_name("$saguin/queue/a/b/response"), None);
    }

    #[test]
    fn a_filter_within_another_is_matched_by_it_everywhere() {
        assert!(filter_within("jobs/#", "jobs/#"));
        assert!(filter_within("jobs/a", "jobs/#"));
        assert!(filter_within("jobs/+/x", "jobs/#"));
        assert!(filter_within("jobs", "jobs/#"));
        assert!(filter_within("iot/w/+/inspect", "iot/+/+/inspect"));
        assert!(!filter_within("#", "jobs/#"));
        assert!(!filter_within("iot/#", "iot/+/+/inspect"));
        assert!(!filter_within("iot/+/+/#", "iot/+/+/inspect"));
        assert!(!filter_within("iot/w/+/inspect/x", "iot/+/+/inspect"));
        assert!(!filter_within("jobs/+", "jobs/a"));
    }
}
