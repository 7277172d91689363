//! When the broker's periodic work falls due: storing moved consumer
//! positions, and the retention sweeps by size and by age. The broker asks
//! at each tick and runs what is due; this module only keeps the clocks.

/// How often retention by size runs; retention by age runs at a tenth of
/// the shortest `retention_period`, and never more often than this.
pub(crate) const SIZE_SWEEP_MS: u64 = 1_000;
const _: () = assert!(SIZE_SWEEP_MS > 0);

pub(crate) struct Timers {
    position_commit_interval_ms: u64,
    last_position_commit_ms: u64,
    age_sweep_interval_ms: u64,
    /// When each retention sweep last ran; `None` until the first, which
    /// runs at the first tick after startup.
    last_size_sweep_ms: Option<u64>,
    last_age_sweep_ms: Option<u64>,
}

/// What one tick is to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    pub positions: bool,
    pub size_sweep: bool,
    pub age_sweep: bool,
}

impl Timers {
    /// `shortest_retention_s` is the shortest age any channel keeps
    /// records or deletions for, if one keeps them by age.
    pub fn new(position_commit_interval_ms: u64, shortest_retention_s: Option<u64>) -> Timers {
        let age_sweep_interval_ms = shortest_retention_s.map_or(SIZE_SWEEP_MS, |s| {
            (s.saturating_mul(1000) / 10).max(SIZE_SWEEP_MS)
        });
        debug_assert!(age_sweep_interval_ms >= SIZE_SWEEP_MS);
        Timers {
            position_commit_interval_ms,
            last_position_commit_ms: 0,
            age_sweep_interval_ms,
            last_size_sweep_ms: None,
            last_age_sweep_ms: None,
        }
    }

    /// What is due at `now_ms`, each counted as run from now.
    pub fn due(&mut self, now_ms: u64) -> Due {
        let positions =
            now_ms.saturating_sub(self.last_position_commit_ms) >= self.position_commit_interval_ms;
        if positions {
            self.last_position_commit_ms = now_ms;
        }
        let size_sweep = self
            .last_size_sweep_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= SIZE_SWEEP_MS);
        if size_sweep {
            self.last_size_sweep_ms = Some(now_ms);
        }
        let age_interval_ms = self.age_sweep_interval_ms;
        let age_sweep = self
            .last_age_sweep_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= age_interval_ms);
        if age_sweep {
            self.last_age_sweep_ms = Some(now_ms);
        }
        Due {
            positions,
            size_sweep,
            age_sweep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_run_at_the_first_tick_then_at_their_intervals() {
        // The shortest retention is 60 s: ages are swept every 6 s.
        let mut timers = Timers::new(200, Some(60));
        let due = timers.due(0);
        assert!(due.size_sweep && due.age_sweep);
        assert!(!due.positions, "positions wait one interval");
        let due = timers.due(1_000);
        assert!(due.positions && due.size_sweep && !due.age_sweep);
        assert!(!timers.due(1_100).positions);
        assert!(timers.due(6_000).age_sweep);
        assert!(!timers.due(6_500).age_sweep);
    }

    #[test]
    fn ages_are_never_swept_more_often_than_sizes() {
        let mut timers = Timers::new(200, Some(1));
        assert!(timers.due(0).age_sweep);
        assert!(!timers.due(999).age_sweep);
        assert!(timers.due(1_000).age_sweep);
    }
}
