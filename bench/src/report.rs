//! Turning runs into medians, ratios and Markdown tables.

use crate::brokers::BrokerKind;

/// One run's result for one broker.
#[derive(Clone, Debug)]
pub enum Sample {
    Value(f64),
    Failed(String),
}

#[derive(Clone, Copy, Debug)]
pub enum Unit {
    MessagesPerS,
    ConnectionsPerS,
    Microseconds,
    Milliseconds,
    Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// One figure, with every run of each broker.
#[derive(Clone, Debug)]
pub struct Row {
    pub label: String,
    pub unit: Unit,
    pub better: Better,
    /// A figure whose feature does not exist yet: shown as n/a.
    pub pending: bool,
    /// A figure measured on saguin alone: mosquitto's cells and the ratio
    /// are shown as —.
    pub saguin_only: bool,
    saguin: Vec<Sample>,
    baseline: Vec<Sample>,
    mosquitto: Vec<Sample>,
}

impl Row {
    pub fn new(label: impl Into<String>, unit: Unit, better: Better) -> Row {
        Row {
            label: label.into(),
            unit,
            better,
            pending: false,
            saguin_only: false,
            saguin: Vec::new(),
            baseline: Vec::new(),
            mosquitto: Vec::new(),
        }
    }

    pub fn push(&mut self, kind: BrokerKind, sample: Sample) {
        match kind {
            BrokerKind::Saguin => self.saguin.push(sample),
            BrokerKind::Baseline => self.baseline.push(sample),
            BrokerKind::Mosquitto => self.mosquitto.push(sample),
        }
    }

    /// A row of the same runs with every value passed through `convert`,
    /// for a figure derived from another (publishes from deliveries).
    pub fn derived(&self, label: impl Into<String>, convert: impl Fn(f64) -> f64) -> Row {
        let map = |samples: &[Sample]| -> Vec<Sample> {
            samples
                .iter()
                .map(|sample| match sample {
                    Sample::Value(value) => Sample::Value(convert(*value)),
                    failed => failed.clone(),
                })
                .collect()
        };
        Row {
            label: label.into(),
            saguin: map(&self.saguin),
            baseline: map(&self.baseline),
            mosquitto: map(&self.mosquitto),
            ..self.clone()
        }
    }

    fn samples(&self, kind: BrokerKind) -> &[Sample] {
        match kind {
            BrokerKind::Saguin => &self.saguin,
            BrokerKind::Baseline => &self.baseline,
            BrokerKind::Mosquitto => &self.mosquitto,
        }
    }

    fn summary(&self, kind: BrokerKind) -> Summary {
        if self.pending {
            return Summary::Pending;
        }
        if self.saguin_only && kind == BrokerKind::Mosquitto {
            return Summary::NotApplicable;
        }
        summarise(self.samples(kind))
    }

    /// The median as its table cell shows it, or why there is none.
    pub fn median_cell(&self, kind: BrokerKind) -> String {
        summary_cell(&self.summary(kind), self.unit)
    }

    /// Every run, as the table of runs shows them.
    pub fn runs_text(&self, kind: BrokerKind) -> String {
        runs_cell(self.samples(kind), self.unit)
    }

    fn has_runs(&self) -> bool {
        self.pending || BrokerKind::ALL.iter().any(|&k| !self.samples(k).is_empty())
    }
}

enum Summary {
    Median(f64),
    /// Some runs failed: no rate is claimed for the figure.
    Failed {
        failed_runs: usize,
        total_runs: usize,
    },
    NoRuns,
    Pending,
    /// mosquitto on a saguin-only figure.
    NotApplicable,
}

fn summarise(samples: &[Sample]) -> Summary {
    let failed_runs = samples
        .iter()
        .filter(|s| matches!(s, Sample::Failed(_)))
        .count();
    if failed_runs > 0 {
        return Summary::Failed {
            failed_runs,
            total_runs: samples.len(),
        };
    }
    let mut values: Vec<f64> = samples
        .iter()
        .filter_map(|s| match s {
            Sample::Value(v) => Some(*v),
            Sample::Failed(_) => None,
        })
        .collect();
    if values.is_empty() {
        return Summary::NoRuns;
    }
    Summary::Median(median(&mut values))
}

/// The middle value; the mean of the two middle ones for an even count.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// `1234567.8` as `1,234,568`.
pub fn with_thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if value < 0.0 {
        grouped.insert(0, '-');
    }
    grouped
}

pub fn format_value(unit: Unit, value: f64) -> String {
    if value.is_nan() {
        return "no samples".to_string();
    }
    match unit {
        Unit::MessagesPerS => format!("{} msg/s", with_thousands(value)),
        Unit::ConnectionsPerS => format!("{} connections/s", with_thousands(value)),
        Unit::Microseconds if value < 10.0 => format!("{value:.2} µs"),
        Unit::Microseconds if value < 100.0 => format!("{value:.1} µs"),
        Unit::Microseconds => format!("{} µs", with_thousands(value)),
        Unit::Milliseconds if value < 100.0 => format!("{value:.1} ms"),
        Unit::Milliseconds => format!("{} ms", with_thousands(value)),
        Unit::Bytes => format_bytes(value),
    }
}

/// Exact bytes, with MiB beside anything a MiB or larger.
pub fn format_bytes(bytes: f64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes.abs() >= MIB {
        format!("{} B ({:.2} MiB)", with_thousands(bytes), bytes / MIB)
    } else {
        format!("{} B", with_thousands(bytes))
    }
}

fn summary_cell(summary: &Summary, unit: Unit) -> String {
    match summary {
        Summary::Median(value) => format_value(unit, *value),
        Summary::Failed {
            failed_runs,
            total_runs,
        } => format!("FAILED ({failed_runs} of {total_runs} runs)"),
        Summary::NoRuns => "not run".to_string(),
        Summary::Pending => "n/a".to_string(),
        Summary::NotApplicable => "—".to_string(),
    }
}

/// `kind`'s median over `other`'s, saying which way is better.
fn ratio_cell(row: &Row, kind: BrokerKind, other: BrokerKind) -> String {
    match (row.summary(kind), row.summary(other)) {
        (Summary::Median(value), Summary::Median(other)) if other > 0.0 => {
            let direction = match row.better {
                Better::Higher => "higher is better",
                Better::Lower => "lower is better",
            };
            format!("{:.2} ({direction})", value / other)
        }
        (Summary::Pending, _) => "n/a".to_string(),
        _ => "—".to_string(),
    }
}

/// The figures as a Markdown table: medians and the saguin/mosquitto ratio,
/// and where any figure ran a baseline, its medians and the new/baseline
/// ratio too.
pub fn results_table(rows: &[Row]) -> String {
    let with_baseline = rows.iter().any(|r| !r.baseline.is_empty());
    let mut table = String::from("| Figure | saguin (median) |");
    if with_baseline {
        table.push_str(" saguin (baseline) (median) |");
    }
    table.push_str(" mosquitto (median) | saguin / mosquitto |");
    if with_baseline {
        table.push_str(" saguin / baseline |");
    }
    let columns = if with_baseline { 6 } else { 4 };
    table.push_str(&format!("\n| --- |{}\n", " ---: |".repeat(columns - 1)));
    for row in rows.iter().filter(|r| r.has_runs()) {
        let median = |kind| summary_cell(&row.summary(kind), row.unit);
        let mut line = format!("| {} | {} |", row.label, median(BrokerKind::Saguin));
        if with_baseline {
            line.push_str(&format!(" {} |", median(BrokerKind::Baseline)));
        }
        line.push_str(&format!(
            " {} | {} |",
            median(BrokerKind::Mosquitto),
            ratio_cell(row, BrokerKind::Saguin, BrokerKind::Mosquitto)
        ));
        if with_baseline {
            line.push_str(&format!(
                " {} |",
                ratio_cell(row, BrokerKind::Saguin, BrokerKind::Baseline)
            ));
        }
        table.push_str(&line);
        table.push('\n');
    }
    table
}

/// Every run of every figure, in the order they ran.
pub fn runs_table(rows: &[Row]) -> String {
    let with_baseline = rows.iter().any(|r| !r.baseline.is_empty());
    let kinds: Vec<BrokerKind> = BrokerKind::ALL
        .into_iter()
        .filter(|&k| with_baseline || k != BrokerKind::Baseline)
        .collect();
    let mut table = String::from("| Figure |");
    for kind in &kinds {
        table.push_str(&format!(" {kind} runs |"));
    }
    table.push_str(&format!("\n| --- |{}\n", " --- |".repeat(kinds.len())));
    for row in rows.iter().filter(|r| !r.pending && r.has_runs()) {
        table.push_str(&format!("| {} |", row.label));
        for &kind in &kinds {
            table.push_str(&format!(" {} |", runs_cell(row.samples(kind), row.unit)));
        }
        table.push('\n');
    }
    table
}

pub fn runs_cell(samples: &[Sample], unit: Unit) -> String {
    if samples.is_empty() {
        return "—".to_string();
    }
    samples
        .iter()
        .map(|sample| match sample {
            Sample::Value(value) => format_value(unit, *value),
            Sample::Failed(_) => "FAILED".to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One figure taken on one broker two ways (with and without a feature),
/// runs alternating between the two.
#[derive(Clone, Debug)]
pub struct PairRow {
    pub label: String,
    pub unit: Unit,
    pub better: Better,
    first: Vec<Sample>,
    second: Vec<Sample>,
}

impl PairRow {
    pub fn new(label: impl Into<String>, unit: Unit, better: Better) -> PairRow {
        PairRow {
            label: label.into(),
            unit,
            better,
            first: Vec::new(),
            second: Vec::new(),
        }
    }

    /// Records a run of the first way (`true`) or the second.
    pub fn push(&mut self, first: bool, sample: Sample) {
        match first {
            true => self.first.push(sample),
            false => self.second.push(sample),
        }
    }

    /// The median of the first way over that of the second.
    pub fn ratio(&self) -> Option<f64> {
        match (summarise(&self.first), summarise(&self.second)) {
            (Summary::Median(first), Summary::Median(second)) if second > 0.0 => {
                Some(first / second)
            }
            _ => None,
        }
    }
}

/// Pair rows as a Markdown table headed by the two ways' names, with the
/// first / second ratio, then every run.
pub fn pair_table(rows: &[PairRow], first: &str, second: &str) -> String {
    let mut table = format!(
        "| Figure | {first} (median) | {second} (median) | {first} / {second} |\n\
         | --- | ---: | ---: | ---: |\n"
    );
    for row in rows {
        let ratio = row.ratio().map_or("—".to_string(), |ratio| {
            let direction = match row.better {
                Better::Higher => "higher is better",
                Better::Lower => "lower is better",
            };
            format!("{ratio:.2} ({direction})")
        });
        table.push_str(&format!(
            "| {} | {} | {} | {ratio} |\n",
            row.label,
            summary_cell(&summarise(&row.first), row.unit),
            summary_cell(&summarise(&row.second), row.unit),
        ));
    }
    table.push('\n');
    for row in rows {
        table.push_str(&format!(
            "Every run, {}: {first}: {}; {second}: {}.\n",
            row.label,
            runs_cell(&row.first, row.unit),
            runs_cell(&row.second, row.unit)
        ));
    }
    table
}

/// Why each failed run failed, one line each.
pub fn failure_lines(rows: &[Row]) -> Vec<String> {
    let mut lines = Vec::new();
    for row in rows {
        for kind in BrokerKind::ALL {
            for (run, sample) in row.samples(kind).iter().enumerate() {
                if let Sample::Failed(reason) = sample {
                    lines.push(format!("{} — {kind} run {}: {reason}", row.label, run + 1));
                }
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(with_thousands(1234567.4), "1,234,567");
        assert_eq!(with_thousands(999.0), "999");
        assert_eq!(with_thousands(-1000.0), "-1,000");
    }

    #[test]
    fn a_baseline_gets_its_columns_and_the_new_over_baseline_ratio() {
        let mut row = Row::new("x", Unit::MessagesPerS, Better::Higher);
        row.push(BrokerKind::Saguin, Sample::Value(90.0));
        row.push(BrokerKind::Baseline, Sample::Value(100.0));
        row.push(BrokerKind::Mosquitto, Sample::Value(45.0));
        let table = results_table(&[row.clone()]);
        assert!(table.contains("| saguin (baseline) (median) |"), "{table}");
        assert!(
            table.contains("| 90 msg/s | 100 msg/s | 45 msg/s | 2.00 (higher is better) | 0.90 (higher is better) |"),
            "{table}"
        );
        let runs = runs_table(&[row]);
        assert!(runs.contains("| baseline runs |"), "{runs}");
        let plain = results_table(&[Row::new("y", Unit::Bytes, Better::Lower)]);
        assert!(!plain.contains("baseline"), "{plain}");
    }

    #[test]
    fn a_pair_row_gives_the_ratio_of_its_medians() {
        let mut row = PairRow::new("acl", Unit::MessagesPerS, Better::Higher);
        for (first, value) in [
            (true, 95.0),
            (false, 100.0),
            (true, 93.0),
            (false, 98.0),
            (true, 97.0),
            (false, 102.0),
        ] {
            row.push(first, Sample::Value(value));
        }
        assert_eq!(row.ratio(), Some(0.95));
        let table = pair_table(&[row], "with", "without");
        assert!(
            table.contains("| acl | 95 msg/s | 100 msg/s | 0.95 (higher is better) |"),
            "{table}"
        );
    }

    #[test]
    fn one_failed_run_fails_the_figure() {
        let mut row = Row::new("x", Unit::MessagesPerS, Better::Higher);
        row.push(BrokerKind::Saguin, Sample::Value(10.0));
        row.push(BrokerKind::Saguin, Sample::Failed("short".into()));
        row.push(BrokerKind::Mosquitto, Sample::Value(5.0));
        let table = results_table(&[row]);
        assert!(table.contains("FAILED (1 of 2 runs)"), "{table}");
        assert!(table.contains("| — |"), "{table}");
    }
}
