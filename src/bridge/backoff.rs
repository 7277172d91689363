//! How long a bridge waits before dialling its peer again: doubling from
//! a short first wait to a ceiling, each wait jittered so that a fleet of
//! gateways losing one upstream does not come back in step.

/// The first wait after a link drops.
pub const FIRST_WAIT_MS: u64 = 250;
/// The longest wait between two attempts.
pub const MAX_WAIT_MS: u64 = 30_000;

#[derive(Debug, Clone)]
pub struct Backoff {
    next_ms: u64,
    /// xorshift64 state: jitter needs spread, not secrecy.
    state: u64,
}

impl Backoff {
    /// `seed` spreads the waits of bridges started together; any value
    /// but zero is as good as another.
    pub fn new(seed: u64) -> Backoff {
        Backoff {
            next_ms: FIRST_WAIT_MS,
            state: seed.max(1),
        }
    }

    /// The wait before the next attempt: between half and all of the
    /// current step, which then doubles up to the ceiling.
    pub fn next_wait_ms(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let step = self.next_ms;
        self.next_ms = (self.next_ms * 2).min(MAX_WAIT_MS);
        step / 2 + self.state % (step / 2 + 1)
    }

    /// A link that came up starts the next outage from the first wait.
    pub fn reset(&mut self) {
        self.next_ms = FIRST_WAIT_MS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_the_ceiling_within_their_jitter_and_reset() {
        let mut backoff = Backoff::new(7);
        let mut step = FIRST_WAIT_MS;
        for _ in 0..20 {
            let wait = backoff.next_wait_ms();
            assert!(wait >= step / 2 && wait <= step, "{wait} outside {step}");
            step = (step * 2).min(MAX_WAIT_MS);
        }
        backoff.reset();
        assert!(backoff.next_wait_ms() <= FIRST_WAIT_MS);
    }

    #[test]
    fn two_seeds_do_not_wait_in_step() {
        let (mut a, mut b) = (Backoff::new(1), Backoff::new(2));
        let waits_a: Vec<u64> = (0..8).map(|_| a.next_wait_ms()).collect();
        let waits_b: Vec<u64> = (0..8).map(|_| b.next_wait_ms()).collect();
        assert_ne!(waits_a, waits_b);
    }
}
