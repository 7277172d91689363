//! How fast each storage provider wears the flash under it: the bytes its
//! storage thread has had written to the device, the rate of the last day,
//! and how many years the device's rated endurance lasts at that rate.
//!
//! The rate is kept sans-IO from readings of a counter at given times, so
//! its arithmetic is tested with simulated time: a reading is kept once
//! an hour, and the rate is taken from the newest kept reading at least a
//! day old (or the first, in a broker up for less than a day) to now. A
//! broker nobody scrapes for longer than a day is given the average since
//! the last reading kept.

use std::collections::VecDeque;

/// A day, the span the rate is taken over.
pub const DAY_MS: u64 = 86_400_000;
/// How far apart the kept readings are.
pub const READING_SPACING_MS: u64 = 3_600_000;
/// Readings kept at most: one an hour across a day, and the one a day old.
pub const MAX_READINGS: usize = (DAY_MS / READING_SPACING_MS) as usize + 2;
/// Days in a year, for the forecast.
const DAYS_PER_YEAR: f64 = 365.25;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reading {
    at_ms: u64,
    written_bytes: u64,
}

/// One provider's kept readings.
#[derive(Debug, Default)]
pub struct WearMeter {
    readings: VecDeque<Reading>,
}

impl WearMeter {
    pub fn new() -> WearMeter {
        WearMeter {
            readings: VecDeque::with_capacity(MAX_READINGS),
        }
    }

    /// Takes the counter's reading `written_bytes` at `at_ms` (a monotonic
    /// clock) and answers the bytes written per day over the window that
    /// ends with it; `None` until some time has passed since the first.
    pub fn observe(&mut self, at_ms: u64, written_bytes: u64) -> Option<f64> {
        let now = Reading {
            at_ms,
            written_bytes,
        };
        let went_back = self
            .readings
            .back()
            .is_some_and(|last| at_ms < last.at_ms || written_bytes < last.written_bytes);
        if went_back {
            // Not the counter read before: start again rather than guess.
            self.readings.clear();
        }
        let due = self
            .readings
            .back()
            .is_none_or(|last| at_ms - last.at_ms >= READING_SPACING_MS);
        if due {
            if self.readings.len() == MAX_READINGS {
                self.readings.pop_front();
            }
            self.readings.push_back(now);
        }
        // The oldest kept is the newest at least a day old.
        while self.readings.len() > 1 && at_ms - self.readings[1].at_ms >= DAY_MS {
            self.readings.pop_front();
        }
        let oldest = self.readings.front()?;
        let span_ms = at_ms - oldest.at_ms;
        (span_ms > 0)
            .then(|| (written_bytes - oldest.written_bytes) as f64 * DAY_MS as f64 / span_ms as f64)
    }
}

/// What one scrape reports of a provider's writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wear {
    /// What its storage thread has caused to be written to the device
    /// since it started; `None` where `/proc` does not say.
    pub written_bytes: Option<u64>,
    pub bytes_per_day: Option<f64>,
    /// The device's rated endurance, as configured.
    pub endurance_bytes: Option<u64>,
    /// Years the endurance lasts at `bytes_per_day`; `None` without an
    /// endurance or a rate, and while nothing is written.
    pub life_years: Option<f64>,
}

impl Wear {
    pub fn new(
        written_bytes: Option<u64>,
        bytes_per_day: Option<f64>,
        endurance_bytes: Option<u64>,
    ) -> Wear {
        let life_years = match (endurance_bytes, bytes_per_day) {
            (Some(endurance), Some(rate)) if rate > 0.0 => {
                Some(endurance as f64 / rate / DAYS_PER_YEAR)
            }
            _ => None,
        };
        Wear {
            written_bytes,
            bytes_per_day,
            endurance_bytes,
            life_years,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_MS: u64 = 60_000;
    const GIB: u64 = 1 << 30;

    /// Feeds `meter` a steady `per_day` from `from_ms` to `to_ms`, read
    /// every `every_ms`, starting at `written`; returns the last rate and
    /// the count written by then.
    fn steady(
        meter: &mut WearMeter,
        (from_ms, to_ms, every_ms): (u64, u64, u64),
        per_day: u64,
        mut written: u64,
    ) -> (Option<f64>, u64) {
        let mut rate = None;
        let mut at_ms = from_ms;
        while at_ms <= to_ms {
            rate = meter.observe(at_ms, written);
            written += per_day * every_ms / DAY_MS;
            at_ms += every_ms;
        }
        (rate, written)
    }

    fn within(rate: Option<f64>, expected: f64, share: f64) -> bool {
        rate.is_some_and(|r| (r - expected).abs() <= expected * share)
    }

    #[test]
    fn a_steady_load_reads_as_its_rate_from_the_first_minute_on() {
        let mut meter = WearMeter::new();
        assert_eq!(meter.observe(0, 0), None, "no time has passed");
        let (rate, _) = steady(&mut meter, (MINUTE_MS, 3 * DAY_MS, 10 * MINUTE_MS), GIB, 0);
        assert!(within(rate, GIB as f64, 0.01), "{rate:?}");
        assert!(meter.readings.len() <= MAX_READINGS);
    }

    #[test]
    fn a_new_rate_has_taken_over_a_day_after_it_began() {
        let mut meter = WearMeter::new();
        let (_, written) = steady(&mut meter, (0, 2 * DAY_MS, 5 * MINUTE_MS), 10 * GIB, 0);
        // The load drops to a tenth: half a day on, the window holds both.
        let start = 2 * DAY_MS + 5 * MINUTE_MS;
        let (rate, written) = steady(
            &mut meter,
            (start, start + DAY_MS / 2, 5 * MINUTE_MS),
            GIB,
            written,
        );
        assert!(within(rate, 5.5 * GIB as f64, 0.1), "{rate:?}");
        // A day and an hour on, only the new rate is in it.
        let later = start + DAY_MS / 2 + 5 * MINUTE_MS;
        let (rate, _) = steady(
            &mut meter,
            (later, start + DAY_MS + READING_SPACING_MS, 5 * MINUTE_MS),
            GIB,
            written,
        );
        assert!(within(rate, GIB as f64, 0.05), "{rate:?}");
    }

    #[test]
    fn days_without_a_reading_give_the_average_since_the_last() {
        let mut meter = WearMeter::new();
        meter.observe(0, 0);
        meter.observe(3 * DAY_MS, 6 * GIB);
        assert!(within(
            meter.observe(3 * DAY_MS, 6 * GIB),
            2.0 * GIB as f64,
            0.0
        ));
    }

    #[test]
    fn a_counter_that_goes_back_starts_the_window_again() {
        let mut meter = WearMeter::new();
        meter.observe(0, 5 * GIB);
        assert_eq!(meter.observe(DAY_MS, GIB), None);
        assert!(within(meter.observe(2 * DAY_MS, 2 * GIB), GIB as f64, 0.0));
    }

    #[test]
    fn life_is_the_endurance_over_the_yearly_rate() {
        // 30 TBW at 10 GB a day: 3,000 days.
        let tb = 1_000_000_000_000u64;
        let wear = Wear::new(Some(1), Some(10e9), Some(30 * tb));
        assert!((wear.life_years.unwrap() - 3000.0 / 365.25).abs() < 1e-9);
        assert_eq!(Wear::new(Some(0), Some(0.0), Some(tb)).life_years, None);
        assert_eq!(Wear::new(Some(1), Some(1.0), None).life_years, None);
        assert_eq!(Wear::new(None, None, Some(tb)).life_years, None);
    }
}
