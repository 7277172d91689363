//! What the soak samples of the broker each interval, the CSV it keeps,
//! and the trend check run over the samples once the run is warm.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::brokers::Broker;
use crate::load::percentile;
use crate::scrape::get_body;

/// One sample of the broker.
#[derive(Clone, Debug)]
pub struct Sample {
    pub elapsed_s: f64,
    pub rss_bytes: u64,
    pub open_files: u64,
    pub store_bytes: u64,
    pub write_bytes: u64,
    /// PUBACK round trips of the QoS 1 publishes since the last sample:
    /// readings (broadcast) and events (into the `append` log).
    pub broadcast_p99_us: f64,
    pub append_p99_us: f64,
    pub broadcast_publishes: usize,
    pub append_publishes: usize,
    /// The machine's 1-minute load average: how busy the rest of it was.
    pub load_1min: f64,
    /// Every series of the `/metrics` scrape, by name and labels.
    pub metrics: BTreeMap<String, f64>,
}

/// Open file descriptors of a process.
fn open_files(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/fd");
    Ok(std::fs::read_dir(&dir)
        .map_err(|e| format!("read {dir}: {e}"))?
        .count() as u64)
}

/// The p99 of a batch of round trips, and how many there were.
fn p99(mut batch: Vec<u64>) -> (f64, usize) {
    batch.sort_unstable();
    (percentile(&batch, 0.99), batch.len())
}

/// Samples `broker`, whose storage file is `store` and whose operations
/// listener is `ops`, taking the round trips gathered since the last call.
pub fn take(
    broker: &Broker,
    store: &Path,
    ops: SocketAddr,
    elapsed: Duration,
    broadcast_us: Vec<u64>,
    append_us: Vec<u64>,
) -> Result<Sample, String> {
    let (broadcast_p99_us, broadcast_publishes) = p99(broadcast_us);
    let (append_p99_us, append_publishes) = p99(append_us);
    Ok(Sample {
        elapsed_s: elapsed.as_secs_f64(),
        rss_bytes: broker.rss_bytes()?,
        open_files: open_files(broker.pid())?,
        store_bytes: std::fs::metadata(store)
            .map_err(|e| format!("{}: {e}", store.display()))?
            .len(),
        write_bytes: broker.device_write_bytes()?,
        broadcast_p99_us,
        append_p99_us,
        broadcast_publishes,
        append_publishes,
        load_1min: crate::machine::load_average_1min()
            .parse()
            .unwrap_or(f64::NAN),
        metrics: parse_metrics(&get_body(ops, "/metrics")?),
    })
}

/// Every sample line of a Prometheus text exposition: `name{labels}` to
/// its value.
pub fn parse_metrics(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.trim().rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The fixed columns of the CSV, in order, then one per metric series.
const COLUMNS: [&str; 10] = [
    "elapsed_s",
    "rss_bytes",
    "open_files",
    "store_bytes",
    "write_bytes",
    "broadcast_puback_p99_us",
    "append_puback_p99_us",
    "broadcast_qos1_publishes",
    "append_publishes",
    "load_1min",
];

/// The whole CSV for `samples`: the fixed columns, then every metric
/// series any sample had, sorted (empty where a sample lacked it).
pub fn csv(samples: &[Sample]) -> String {
    let series: BTreeSet<&String> = samples.iter().flat_map(|s| s.metrics.keys()).collect();
    let quote = |cell: &str| format!("\"{}\"", cell.replace('"', "\"\""));
    let mut out = COLUMNS.join(",");
    for name in &series {
        out.push(',');
        out.push_str(&quote(name));
    }
    out.push('\n');
    let number = |v: f64| {
        if v.is_nan() {
            String::new()
        } else {
            format!("{v}")
        }
    };
    for s in samples {
        out.push_str(&format!(
            "{:.1},{},{},{},{},{},{},{},{},{}",
            s.elapsed_s,
            s.rss_bytes,
            s.open_files,
            s.store_bytes,
            s.write_bytes,
            number(s.broadcast_p99_us),
            number(s.append_p99_us),
            s.broadcast_publishes,
            s.append_publishes,
            number(s.load_1min)
        ));
        for name in &series {
            out.push(',');
            out.push_str(&s.metrics.get(*name).map_or(String::new(), |v| number(*v)));
        }
        out.push('\n');
    }
    out
}

/// A quantity the soak fails on if it climbs once warm.
pub struct Bound {
    pub name: &'static str,
    pub unit: &'static str,
    pub value: fn(&Sample) -> f64,
    /// The rise allowed over the post-warm-up span: this share of the
    /// post-warm-up median...
    pub share_of_median: f64,
    /// ...or this much, whichever is larger.
    pub at_least: f64,
}

/// What the soak holds the broker to, once warm.
pub const BOUNDS: [Bound; 3] = [
    Bound {
        name: "RSS",
        unit: "bytes",
        value: |s| s.rss_bytes as f64,
        share_of_median: 0.05,
        at_least: 2.0 * 1024.0 * 1024.0,
    },
    Bound {
        name: "open files",
        unit: "",
        value: |s| s.open_files as f64,
        share_of_median: 0.05,
        at_least: 8.0,
    },
    Bound {
        name: "broadcast PUBACK p99",
        unit: "µs",
        value: |s| s.broadcast_p99_us,
        share_of_median: 1.0,
        at_least: 5000.0,
    },
];

/// One bound judged over the post-warm-up samples.
#[derive(Clone, Debug)]
pub struct Trend {
    pub name: &'static str,
    pub unit: &'static str,
    pub median: f64,
    /// The fitted rise over the post-warm-up span.
    pub rise: f64,
    pub allowed: f64,
}

impl Trend {
    pub fn holds(&self) -> bool {
        self.rise <= self.allowed
    }
}

/// Fewer post-warm-up samples than this cannot show a trend.
pub const MIN_TREND_SAMPLES: usize = 5;

/// Judges every bound over the samples taken after `warm_s`: the
/// Theil-Sen slope (the median of the slopes between every pair of
/// samples, so one sample spiking while the machine is busy does not
/// tilt it) times the span of those samples must not exceed the bound's
/// allowance. `Err` when there are too few samples to judge.
pub fn judge(samples: &[Sample], warm_s: f64) -> Result<Vec<Trend>, String> {
    let warm: Vec<&Sample> = samples.iter().filter(|s| s.elapsed_s >= warm_s).collect();
    if warm.len() < MIN_TREND_SAMPLES {
        return Err(format!(
            "{} samples after the warm-up, fewer than the {MIN_TREND_SAMPLES} a trend needs: \
             run longer or sample more often (--sample-every)",
            warm.len()
        ));
    }
    Ok(BOUNDS
        .iter()
        .map(|bound| {
            let points: Vec<(f64, f64)> = warm
                .iter()
                .map(|s| (s.elapsed_s, (bound.value)(s)))
                .filter(|(_, v)| v.is_finite())
                .collect();
            let median = median(points.iter().map(|p| p.1).collect());
            let span = match (points.first(), points.last()) {
                (Some(first), Some(last)) => last.0 - first.0,
                _ => 0.0,
            };
            Trend {
                name: bound.name,
                unit: bound.unit,
                median,
                rise: theil_sen_slope(&points) * span,
                allowed: (bound.share_of_median * median).max(bound.at_least),
            }
        })
        .collect())
}

/// The median; NaN for none (`report::median` needs at least one).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    crate::report::median(&mut values)
}

/// The median of the slopes between every pair of points with distinct
/// times; 0 with fewer than two.
pub fn theil_sen_slope(points: &[(f64, f64)]) -> f64 {
    let mut slopes = Vec::new();
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if b.0 != a.0 {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    if slopes.is_empty() {
        0.0
    } else {
        median(slopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(elapsed_s: f64, rss_bytes: u64) -> Sample {
        Sample {
            elapsed_s,
            rss_bytes,
            open_files: 230,
            store_bytes: 0,
            write_bytes: 0,
            broadcast_p99_us: 400.0,
            append_p99_us: f64::NAN,
            broadcast_publishes: 1,
            append_publishes: 0,
            load_1min: 0.5,
            metrics: BTreeMap::from([("saguin_x{a=\"b\"}".to_string(), 1.0)]),
        }
    }

    #[test]
    fn a_flat_run_with_one_spike_holds() {
        let mut samples: Vec<Sample> = (0..20).map(|i| sample(i as f64 * 60.0, 40 << 20)).collect();
        samples[15].rss_bytes = 80 << 20;
        let trends = judge(&samples, 300.0).unwrap();
        assert!(trends.iter().all(Trend::holds), "{trends:?}");
    }

    #[test]
    fn a_steady_climb_fails() {
        // 40 MiB growing by 200 KiB a minute: 3 MiB over the 15 warm minutes.
        let samples: Vec<Sample> = (0..20)
            .map(|i| sample(i as f64 * 60.0, (40 << 20) + i * 200 * 1024))
            .collect();
        let trends = judge(&samples, 300.0).unwrap();
        assert!(!trends[0].holds(), "{:?}", trends[0]);
        assert!(trends[1].holds() && trends[2].holds());
    }

    #[test]
    fn too_few_samples_cannot_be_judged() {
        let samples: Vec<Sample> = (0..6).map(|i| sample(i as f64, 1)).collect();
        assert!(judge(&samples, 2.0).is_err());
    }

    #[test]
    fn metrics_and_csv() {
        let metrics = parse_metrics("# HELP x\nsaguin_up 1\nsaguin_y{k=\"v w\"} 2.5\n\n");
        assert_eq!(metrics.get("saguin_y{k=\"v w\"}"), Some(&2.5));
        let text = csv(&[sample(0.0, 5)]);
        assert!(text.starts_with("elapsed_s,rss_bytes,"), "{text}");
        assert!(text.contains(",\"saguin_x{a=\"\"b\"\"}\"\n"), "{text}");
        assert!(
            text.lines().nth(1).unwrap().contains(",400,,1,0,0.5,1"),
            "{text}"
        );
    }
}
