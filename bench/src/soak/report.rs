//! The soak's outputs: the CSV, the plot (matplotlib, through
//! `plot.py`), and a Markdown summary, which `--write` also puts in a
//! file's `## Soak` section.

use std::path::Path;
use std::process::{Command, Stdio};

use super::actors::Mix;
use super::ledger::Counts;
use super::samples::{self, Sample, Trend};
use super::{Accounting, SoakOptions};
use crate::report::{format_bytes, with_thousands};

/// The plotting script, run by `python3 -`.
const PLOT_SCRIPT: &str = include_str!("plot.py");
/// Where a file's soak section starts; it runs to the next `## ` heading.
pub const SECTION_HEADING: &str = "## Soak";

/// Everything a report says.
pub struct Run<'a> {
    pub options: &'a SoakOptions,
    pub started_at: String,
    pub samples: &'a [Sample],
    pub warm_s: f64,
    pub trends: &'a [Trend],
    pub accounting: &'a Accounting,
    pub states_checked: usize,
    pub counts: &'a Counts,
    pub mix: &'a Mix,
    pub failures: &'a [String],
}

/// Writes soak.csv, soak.png and soak.md into the output directory (and
/// the section and plot `--write` asks for); returns the summary.
pub fn write(run: &Run) -> Result<String, String> {
    let out = &run.options.out;
    let csv = out.join("soak.csv");
    let png = out.join("soak.png");
    std::fs::write(&csv, samples::csv(run.samples))
        .map_err(|e| format!("write {}: {e}", csv.display()))?;
    let verdict = if run.failures.is_empty() {
        "passed"
    } else {
        "FAILED"
    };
    let title = format!(
        "saguin soak, {:.2} h, {} ({verdict})",
        run.options.run.as_secs_f64() / 3600.0,
        crate::machine::describe(Path::new("/usr/sbin/mosquitto")).saguin_revision
    );
    plot(&csv, &png, run.warm_s, &title)?;
    let plot_link = run
        .options
        .write_plot
        .as_deref()
        .unwrap_or(Path::new("soak.png"));
    let summary = summary(run, &plot_link.display().to_string());
    let md = out.join("soak.md");
    std::fs::write(&md, &summary).map_err(|e| format!("write {}: {e}", md.display()))?;
    println!(
        "soak: wrote {}, {} and {}",
        csv.display(),
        png.display(),
        md.display()
    );
    if let (Some(file), Some(plot_copy)) = (&run.options.write, &run.options.write_plot) {
        std::fs::copy(&png, plot_copy)
            .map_err(|e| format!("copy the plot to {}: {e}", plot_copy.display()))?;
        let old = std::fs::read_to_string(file).unwrap_or_default();
        std::fs::write(file, with_section(&old, &summary))
            .map_err(|e| format!("write {}: {e}", file.display()))?;
        println!(
            "soak: wrote the section in {} and {}",
            file.display(),
            plot_copy.display()
        );
    }
    Ok(summary)
}

fn plot(csv: &Path, png: &Path, warm_s: f64, title: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("python3")
        .arg("-")
        .arg(csv)
        .arg(png)
        .arg(format!("{warm_s}"))
        .arg(title)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start python3 for the plot: {e}"))?;
    let _ = child
        .stdin
        .take()
        .expect("piped")
        .write_all(PLOT_SCRIPT.as_bytes());
    let status = child.wait().map_err(|e| format!("python3: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| "the plot failed (it needs matplotlib: pip install matplotlib)".to_string())
}

/// `document` with its soak section (from `SECTION_HEADING` to the next
/// `## ` heading) replaced by `section`, or `section` added at the end.
pub fn with_section(document: &str, section: &str) -> String {
    let section = section.trim_end();
    match section_range(document) {
        Some((start, end)) => format!(
            "{}{section}\n{}{}",
            &document[..start],
            if end < document.len() { "\n" } else { "" },
            &document[end..]
        ),
        None if document.is_empty() => format!("{section}\n"),
        None => format!("{}\n\n{section}\n", document.trim_end()),
    }
}

/// The soak section of `document`, if it has one.
pub fn section_of(document: &str) -> Option<&str> {
    section_range(document).map(|(start, end)| &document[start..end])
}

fn section_range(document: &str) -> Option<(usize, usize)> {
    let heading = format!("{SECTION_HEADING}\n");
    let start = if document.starts_with(&heading) {
        0
    } else {
        document.find(&format!("\n{heading}"))? + 1
    };
    let end = document[start + SECTION_HEADING.len()..]
        .find("\n## ")
        .map_or(document.len(), |i| start + SECTION_HEADING.len() + i + 1);
    Some((start, end))
}

fn summary(run: &Run, plot_link: &str) -> String {
    let samples = run.samples;
    let warm: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.elapsed_s >= run.warm_s)
        .collect();
    let machine = crate::machine::describe(Path::new("/usr/sbin/mosquitto"));
    let mix = run.mix;
    let loads: Vec<f64> = samples
        .iter()
        .map(|s| s.load_1min)
        .filter(|l| l.is_finite())
        .collect();
    let (load_min, load_max) = loads.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &l| {
        (lo.min(l), hi.max(l))
    });
    let mut doc = format!(
        "{SECTION_HEADING}\n\n\
         Written by `make soak` (`saguin-bench soak`, bench/src/soak/): run it again rather than \
         edit this.\n\n\
         - Started {}, {:.2} h, a sample every {} s; the first {:.0} s are the warm-up.\n\
         - saguin {} on `{}` (paths and ports moved into a temporary directory, an operations \
         listener on loopback, the channels and bridge below added); mosquitto {} upstream.\n\
         - {} CPUs ({}), shared: the 1-minute load average ran {load_min:.2} to \
         {load_max:.2} over the samples.\n\
         - The mix: {} sensors on {} connections ({} each, every fourth MQTT 3.1.1), each \
         sensor publishing a reading every {:?} (QoS 0 and 1 in turn, broadcast), its state \
         every {:?} (`latest` channel `state/+`) and an event every {:?} (`append` log `log/#`, \
         retention 8 MiB); a job every {:?} into a queue with {} workers that return {:.0}% of \
         them; two durable consumers of the log, one away for {:?} in every {:?}; a bridge \
         carrying the log to mosquitto, which is stopped every {:?} for {:?}; connections \
         reconnecting at random (a mean life of {:?}, half leaving without DISCONNECT) and a \
         client with a new random id every {:?} on average, a third of them leaving a session \
         of 30 s behind. Seed {}.\n\n",
        run.started_at,
        run.options.run.as_secs_f64() / 3600.0,
        run.options.sample_every.as_secs_f64(),
        run.warm_s,
        machine.saguin_revision,
        run.options
            .board
            .file_name()
            .unwrap_or_default()
            .to_string_lossy(),
        machine.mosquitto_version,
        machine.cpus,
        machine.cpu_model,
        mix.sensors,
        mix.sensor_connections(),
        mix.sensors_per_connection,
        mix.reading_every,
        mix.state_every,
        mix.event_every,
        mix.job_every,
        mix.workers,
        mix.job_return_share * 100.0,
        mix.away_cycle,
        mix.away_cycle * 2,
        mix.outage_every,
        mix.outage_length,
        mix.connection_life,
        mix.random_client_every,
        run.options.seed,
    );
    doc.push_str(if run.failures.is_empty() {
        "**Passed.**\n\n"
    } else {
        "**Failed:**\n\n"
    });
    for failure in run.failures {
        doc.push_str(&format!("- {failure}\n"));
    }
    if !run.failures.is_empty() {
        doc.push('\n');
    }
    doc.push_str(
        "Trends after the warm-up: the Theil-Sen slope (the median of the slopes between every \
         pair of samples) times the span of the samples, against the allowance.\n\n\
         | | median after warm-up | fitted rise | allowed rise | |\n|---|---:|---:|---:|---|\n",
    );
    for trend in run.trends {
        let show = |v: f64| match trend.unit {
            "bytes" => format_bytes(v),
            unit => format!("{} {unit}", with_thousands(v.round()))
                .trim_end()
                .to_string(),
        };
        doc.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            trend.name,
            show(trend.median),
            show(trend.rise),
            show(trend.allowed),
            if trend.holds() { "holds" } else { "**climbs**" }
        ));
    }
    let first_last = |f: fn(&Sample) -> f64| {
        (
            warm.first().map_or(f64::NAN, |s| f(s)),
            warm.last().map_or(f64::NAN, |s| f(s)),
            samples.iter().map(f).fold(f64::NAN, f64::max),
        )
    };
    let (rss_first, rss_last, rss_max) = first_last(|s| s.rss_bytes as f64);
    let (store_first, store_last, store_max) = first_last(|s| s.store_bytes as f64);
    let written = samples.last().map_or(0.0, |s| s.write_bytes as f64);
    let append_p99: Vec<f64> = warm
        .iter()
        .map(|s| s.append_p99_us)
        .filter(|v| v.is_finite())
        .collect();
    let append_median = if append_p99.is_empty() {
        f64::NAN
    } else {
        crate::report::median(&mut append_p99.clone())
    };
    let a = run.accounting;
    let c = |counter| Counts::get(counter);
    doc.push_str(&format!(
        "\n- RSS: {} when warm, {} at the end, {} at most.\n\
         - The redb file: {} when warm, {} at the end, {} at most; {} written to the device \
         over the run (`write_bytes`).\n\
         - An `append` event's PUBACK (after its commit, which waits up to the profile's 50 ms): \
         p99 {} µs, the median of the post-warm-up samples.\n\
         - Records: {} log records acknowledged, {}; \
         {} jobs acknowledged, {} answered `ack` and {} dead-lettered, {} left in the queue; \
         {} sensors' state read back at least as new as acknowledged.\n\
         - On the way: {} publishes, {} refused, {} planned reconnects, {} outages of the peer, \
         {} jobs returned, {} durable sessions found gone, {} connections that failed or broke \
         unasked{}.\n\n\
         ![the soak: RSS, open files, the redb file, bytes written, PUBACK p99 and the \
         load]({plot_link})\n",
        format_bytes(rss_first),
        format_bytes(rss_last),
        format_bytes(rss_max),
        format_bytes(store_first),
        format_bytes(store_last),
        format_bytes(store_max),
        format_bytes(written),
        with_thousands(append_median.round()),
        with_thousands(a.events_acked as f64),
        a.events_missing
            .iter()
            .map(|(reader, count, _)| match count {
                0 => format!("every one found at {reader}"),
                n => format!("{} missing at {reader}", with_thousands(*n as f64)),
            })
            .collect::<Vec<_>>()
            .join(", "),
        with_thousands(a.jobs_acked as f64),
        with_thousands(a.jobs_done as f64),
        a.dead_letters,
        a.jobs_unresolved
            .as_ref()
            .map_or("?".to_string(), |n| n.to_string()),
        run.states_checked,
        with_thousands(c(&run.counts.publishes) as f64),
        c(&run.counts.refusals),
        with_thousands(c(&run.counts.reconnects) as f64),
        c(&run.counts.outages),
        c(&run.counts.jobs_returned),
        c(&run.counts.sessions_lost),
        c(&run.counts.broker_errors),
        match run.counts.last_broker_error.lock().expect("error").as_str() {
            "" => String::new(),
            last => format!(" (the last: {last})"),
        },
    ));
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_replaced_in_place_or_added() {
        let doc = "# B\n\n## A\n\na\n\n## Soak\n\nold\n\n## C\n\nc\n";
        let new = with_section(doc, "## Soak\n\nnew\n");
        assert_eq!(new, "# B\n\n## A\n\na\n\n## Soak\n\nnew\n\n## C\n\nc\n");
        assert_eq!(section_of(&new), Some("## Soak\n\nnew\n\n"));
        let last = with_section("# B\n\n## Soak\n\nold\n", "## Soak\n\nnew");
        assert_eq!(last, "# B\n\n## Soak\n\nnew\n");
        assert_eq!(
            with_section("# B\n", "## Soak\n\nx\n"),
            "# B\n\n## Soak\n\nx\n"
        );
        assert_eq!(section_of("# B\n## Soaking\n"), None);
    }
}
