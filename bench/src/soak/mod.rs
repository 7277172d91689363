//! `saguin-bench soak`: a gateway's day, compressed into hours, against
//! the release broker on a board profile. Sensors, a device-state
//! `latest` channel, an `append` log read by two consumers and carried
//! upstream by a bridge to a mosquitto that goes away and comes back, a
//! queue with workers, and clients that come and go. The broker is sampled
//! every interval into a CSV and a plot; the run fails if RSS, open files
//! or publish latency climb once warm, or if anything acknowledged is not
//! found at the end.

mod actors;
mod ledger;
mod profile;
mod report;
mod samples;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use saguin::codec::{Packet, ProtocolVersion, QoS};

use crate::brokers::{free_loopback_port, Broker, BrokerKind, MosquittoSetup, SaguinSetup};
use crate::client::{Client, ClientOptions, SessionStart};
use actors::{Flags, Latencies, Mix, Presence, Reader, Shared};
use ledger::{payload_id, Ledger};
use samples::Sample;

pub use report::{section_of, with_section};

const USAGE: &str = "\
usage: saguin-bench soak [--hours H] [--sample-every DURATION] [--out DIR]
                         [--write FILE --write-plot PNG] [--board FILE] [--seed N]
                         [--saguin-bin PATH]
  --hours H              length of the run; fractions allowed (default 1)
  --sample-every D       e.g. 10s or 1m (default 1m, or an 18th of a shorter run)
  --out DIR              where soak.csv, soak.png and soak.md go (default target/soak)
  --write FILE           also put the summary in FILE's `## Soak` section (BENCHMARKS.md)
  --write-plot PNG       with --write: copy the plot here, as the section links it
  --board FILE           the board profile (default boards/raspberry-pi-zero-2w.yaml)
  --seed N               the mix's random seed (default: from the clock; printed)
  --saguin-bin PATH      the broker binary (default: saguin beside this executable)";

/// The share of the run, from its start, not judged for trends.
const WARM_UP_SHARE: f64 = 0.25;
/// Longest the end of the run may take for every reader to catch up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest the readers may take to subscribe before the producers start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest the bridge may take to bring its link up.
const LINK_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest the final state pass may take.
const STATE_PASS_TIMEOUT: Duration = Duration::from_secs(60);
/// Ids of missing records listed in a failure.
const MISSING_SHOWN: usize = 10;

pub struct SoakOptions {
    pub run: Duration,
    pub sample_every: Duration,
    pub out: PathBuf,
    pub write: Option<PathBuf>,
    pub write_plot: Option<PathBuf>,
    pub board: PathBuf,
    pub seed: u64,
    pub saguin_bin: Option<PathBuf>,
}

/// A duration as the broker's configuration writes one (`10s`, `1m`).
fn parse_duration(text: &str) -> Result<Duration, String> {
    saguin::config::parse_duration_ms(text)
        .map(Duration::from_millis)
        .map_err(|e| format!("--sample-every {text:?}: {e}"))
        .and_then(|d| match d.is_zero() {
            true => Err("--sample-every must be above zero".to_string()),
            false => Ok(d),
        })
}

fn parse_args(args: &[String]) -> Result<SoakOptions, String> {
    let mut hours = 1.0f64;
    let mut sample_every = None;
    let mut options = SoakOptions {
        run: Duration::ZERO,
        sample_every: Duration::ZERO,
        out: PathBuf::from("target/soak"),
        write: None,
        write_plot: None,
        board: PathBuf::from(profile::DEFAULT_BOARD),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        saguin_bin: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--hours" => {
                let text = value()?;
                hours = text
                    .parse()
                    .ok()
                    .filter(|h: &f64| h.is_finite() && *h > 0.0)
                    .ok_or(format!("--hours {text:?}: a positive number of hours"))?;
            }
            "--sample-every" => sample_every = Some(parse_duration(&value()?)?),
            "--out" => options.out = value()?.into(),
            "--write" => options.write = Some(value()?.into()),
            "--write-plot" => options.write_plot = Some(value()?.into()),
            "--board" => options.board = value()?.into(),
            "--seed" => {
                let text = value()?;
                options.seed = text.parse().map_err(|_| format!("--seed {text:?}"))?;
            }
            "--saguin-bin" => options.saguin_bin = Some(value()?.into()),
            other => return Err(format!("unrecognised argument {other:?}")),
        }
    }
    if options.write.is_some() != options.write_plot.is_some() {
        return Err("--write and --write-plot go together".into());
    }
    options.run = Duration::from_secs_f64(hours * 3600.0);
    options.sample_every = sample_every.unwrap_or_else(|| {
        (options.run / 18).clamp(Duration::from_secs(1), Duration::from_secs(60))
    });
    Ok(options)
}

/// The command's entry point: `args` are those after `soak`.
pub fn main(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(outcome) => {
            println!("\n{}", outcome.summary);
            if outcome.failures.is_empty() {
                println!("soak: passed");
                ExitCode::SUCCESS
            } else {
                for failure in &outcome.failures {
                    eprintln!("soak: FAILED: {failure}");
                }
                ExitCode::FAILURE
            }
        }
        Err(message) => {
            eprintln!("soak: could not run: {message}");
            ExitCode::FAILURE
        }
    }
}

/// What a run found.
pub struct Outcome {
    pub summary: String,
    pub failures: Vec<String>,
}

/// The whole run: start, load, sample, drain, check, report.
fn run(options: &SoakOptions) -> Result<Outcome, String> {
    let binaries = crate::broker_binaries(options.saguin_bin.clone(), None)?;
    std::fs::create_dir_all(&options.out)
        .map_err(|e| format!("create {}: {e}", options.out.display()))?;
    let board = std::fs::read_to_string(&options.board)
        .map_err(|e| format!("read {}: {e}", options.board.display()))?;
    let started_at = crate::machine::utc_now();
    let mix = Mix::for_run(options.run);
    println!(
        "soak: {:.2} h on {}, a sample every {:?}, seed {}\n      {mix:?}",
        options.run.as_secs_f64() / 3600.0,
        options.board.display(),
        options.sample_every,
        options.seed
    );

    let peer = Broker::start_as(
        BrokerKind::Mosquitto,
        &binaries,
        SaguinSetup::Plain,
        MosquittoSetup::Persistent,
    )?;
    let ops_port = free_loopback_port()?;
    let ops = SocketAddr::from(([127, 0, 0, 1], ops_port));
    let peer_port = peer.address.port();
    let broker = Broker::start_saguin_on(
        &binaries,
        |dir| profile::soak_config(&board, dir, ops_port, peer_port),
        Some(ops_port),
    )?;
    let store = broker.dir().join(profile::STORE_FILE);
    println!(
        "soak: saguin on {} (pid {}, operations {ops}), mosquitto upstream on {}",
        broker.address,
        broker.pid(),
        peer.address
    );
    let link_deadline = Instant::now() + LINK_TIMEOUT;
    while !broker.output_contains("bridge upstream: link to") {
        if Instant::now() > link_deadline {
            return Err("the bridge's link to mosquitto did not come up".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let preloaded = Instant::now();
    crate::queue::publish_backlog_sized(
        broker.address,
        "soak-archive",
        profile::ARCHIVE_RECORDS,
        profile::ARCHIVE_RECORD_BYTES,
        |i| format!("archive/{}", i % 16),
    )
    .map_err(|e| format!("filling the archive channel: {e}"))?;
    println!(
        "soak: {} archive records of {} B stored in {:.1} s",
        profile::ARCHIVE_RECORDS,
        profile::ARCHIVE_RECORD_BYTES,
        preloaded.elapsed().as_secs_f64()
    );
    let shared = Arc::new(Shared {
        ledger: Ledger::new(mix.sensors),
        mix,
        broker: broker.endpoint(),
        flags: Flags::default(),
        latencies: Latencies::default(),
    });
    let readers = spawn_readers(&shared, peer.endpoint(), options.seed);
    let ready_deadline = Instant::now() + READY_TIMEOUT;
    while shared.flags.readers_ready.load(Ordering::Relaxed) < readers.len() {
        if Instant::now() > ready_deadline {
            shared.flags.stop_all.store(true, Ordering::Relaxed);
            return Err(format!(
                "readers did not subscribe in time: {}",
                shared
                    .ledger
                    .counts
                    .last_broker_error
                    .lock()
                    .expect("error")
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let producers = spawn_producers(&shared, options.seed);
    let seed = options.seed;
    let workers: Vec<JoinHandle<()>> = (0..shared.mix.workers)
        .map(|i| {
            let shared = shared.clone();
            std::thread::spawn(move || actors::worker(shared, i, seed))
        })
        .collect();
    let outages = {
        let (shared, binaries) = (shared.clone(), binaries.clone());
        std::thread::spawn(move || actors::outages(shared, peer, binaries))
    };

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    let csv_path = options.out.join("soak.csv");
    let mut next_sample = started + options.sample_every;
    while next_sample <= started + options.run {
        std::thread::sleep(next_sample.saturating_duration_since(Instant::now()));
        next_sample += options.sample_every;
        let broadcast = std::mem::take(&mut *shared.latencies.broadcast_us.lock().expect("l"));
        let append = std::mem::take(&mut *shared.latencies.append_us.lock().expect("l"));
        match samples::take(&broker, &store, ops, started.elapsed(), broadcast, append) {
            Ok(sample) => {
                print_progress(&sample, &shared.ledger);
                samples.push(sample);
                std::fs::write(&csv_path, samples::csv(&samples))
                    .map_err(|e| format!("write {}: {e}", csv_path.display()))?;
            }
            Err(error) => {
                failures.push(format!("sampling the broker failed: {error}"));
                break;
            }
        }
    }

    // The end: producers leave, the peer stays up, readers catch up.
    shared.flags.stop_producing.store(true, Ordering::Relaxed);
    join_all(producers);
    shared.flags.draining.store(true, Ordering::Relaxed);
    let peer = outages
        .join()
        .map_err(|_| "the outage thread panicked".to_string())?;
    let drain_started = Instant::now();
    let accounting = loop {
        let accounting = account(&shared.ledger, ops);
        if accounting.complete() || drain_started.elapsed() > DRAIN_TIMEOUT {
            break accounting;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    failures.extend(accounting.failures());
    let states = check_states(&shared, broker.endpoint());
    failures.extend(states.clone().err());
    shared.flags.stop_all.store(true, Ordering::Relaxed);
    join_all(readers);
    join_all(workers);
    broker.stop();
    if let Ok(peer) = peer {
        peer.stop();
    } else if let Err(error) = peer {
        failures.push(format!("restarting the upstream mosquitto failed: {error}"));
    }

    let warm_s = options.run.as_secs_f64() * WARM_UP_SHARE;
    let trends = match samples::judge(&samples, warm_s) {
        Ok(trends) => trends,
        Err(error) => {
            failures.push(error);
            Vec::new()
        }
    };
    for trend in trends.iter().filter(|t| !t.holds()) {
        failures.push(format!(
            "{} rose by {:.0} {} after the warm-up, more than the {:.0} allowed",
            trend.name, trend.rise, trend.unit, trend.allowed
        ));
    }
    let run = report::Run {
        options,
        started_at,
        samples: &samples,
        warm_s,
        trends: &trends,
        accounting: &accounting,
        states_checked: states.unwrap_or(0),
        counts: &shared.ledger.counts,
        mix: &shared.mix,
        failures: &failures,
    };
    let summary = report::write(&run)?;
    Ok(Outcome { summary, failures })
}

fn print_progress(sample: &Sample, ledger: &Ledger) {
    println!(
        "soak: {:>6.0} s  rss {:>6.1} MiB  files {:>4}  store {:>6.1} MiB  written {:>7.1} MiB  \
         p99 {:>6.0} µs (append {:>6.0} µs)  acked {} events {} jobs  load {:.2}",
        sample.elapsed_s,
        sample.rss_bytes as f64 / 1048576.0,
        sample.open_files,
        sample.store_bytes as f64 / 1048576.0,
        sample.write_bytes as f64 / 1048576.0,
        sample.broadcast_p99_us,
        sample.append_p99_us,
        ledger.events_acked.len(),
        ledger.jobs_acked.len(),
        sample.load_1min,
    );
}

fn join_all(handles: Vec<JoinHandle<()>>) {
    for handle in handles {
        let _ = handle.join();
    }
}

/// The readers: the log's two consumers, the dead letters, a watcher of
/// device state, and the subscriber at the upstream peer.
fn spawn_readers(
    shared: &Arc<Shared>,
    upstream: crate::client::Endpoint,
    seed: u64,
) -> Vec<JoinHandle<()>> {
    let durable = SessionStart::Resume {
        expiry_s: actors::READER_SESSION_EXPIRY_S,
    };
    let readers = [
        Reader {
            client_id: "soak-log-live".into(),
            endpoint: shared.broker.clone(),
            filter: profile::LOG_FILTER.into(),
            start: durable,
            presence: Presence::Mostly,
            delivered: Some(|l| &l.live_consumer),
            count_failures: true,
        },
        Reader {
            client_id: "soak-log-away".into(),
            endpoint: shared.broker.clone(),
            filter: profile::LOG_FILTER.into(),
            start: durable,
            presence: Presence::HalfTheTime,
            delivered: Some(|l| &l.away_consumer),
            count_failures: true,
        },
        Reader {
            client_id: "soak-dead-letters".into(),
            endpoint: shared.broker.clone(),
            filter: profile::DEAD_LETTER_FILTER.into(),
            start: durable,
            presence: Presence::Always,
            delivered: Some(|l| &l.dead_letters),
            count_failures: true,
        },
        Reader {
            client_id: "soak-state-watcher".into(),
            endpoint: shared.broker.clone(),
            filter: "state/#".into(),
            start: SessionStart::Clean,
            presence: Presence::Mostly,
            delivered: None,
            count_failures: true,
        },
        Reader {
            client_id: "soak-upstream".into(),
            endpoint: upstream,
            filter: profile::UPSTREAM_FILTER.into(),
            start: durable,
            presence: Presence::Always,
            delivered: Some(|l| &l.upstream),
            count_failures: false,
        },
    ];
    readers
        .into_iter()
        .enumerate()
        .map(|(i, reader)| {
            let shared = shared.clone();
            std::thread::spawn(move || actors::reader(shared, reader, seed, 30_000 + i as u64))
        })
        .collect()
}

/// The sensors' connections, the job producer and the random clients.
fn spawn_producers(shared: &Arc<Shared>, seed: u64) -> Vec<JoinHandle<()>> {
    let mix = &shared.mix;
    let mut handles = Vec::new();
    for index in 0..=mix.sensor_connections() {
        // The last index is the job producer, with no sensors.
        let first = index * mix.sensors_per_connection;
        let sensors: Vec<usize> = (first..(first + mix.sensors_per_connection).min(mix.sensors))
            .take_while(|_| index < mix.sensor_connections())
            .collect();
        let shared = shared.clone();
        handles.push(std::thread::spawn(move || {
            actors::producer(shared, index, sensors, seed)
        }));
    }
    let shared = shared.clone();
    handles.push(std::thread::spawn(move || {
        actors::random_clients(shared, seed)
    }));
    handles
}

/// Every acknowledged record, and where it was found.
pub struct Accounting {
    pub events_acked: u64,
    /// Missing from each reader of the log: (reader, count, first ids).
    pub events_missing: Vec<(&'static str, u64, Vec<u64>)>,
    pub jobs_acked: u64,
    pub jobs_done: u64,
    pub dead_letters: u64,
    pub jobs_missing: (u64, Vec<u64>),
    /// Jobs the queue still holds, as its operations route says.
    pub jobs_unresolved: Result<u64, String>,
}

impl Accounting {
    fn complete(&self) -> bool {
        self.failures().is_empty()
    }

    fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for (reader, count, first) in &self.events_missing {
            if *count > 0 {
                failures.push(format!(
                    "{count} of {} acknowledged log records never reached {reader} (first ids {first:?})",
                    self.events_acked
                ));
            }
        }
        let (count, first) = &self.jobs_missing;
        if *count > 0 {
            failures.push(format!(
                "{count} of {} acknowledged jobs were neither answered nor dead-lettered (first ids {first:?})",
                self.jobs_acked
            ));
        }
        match &self.jobs_unresolved {
            Ok(0) => {}
            Ok(n) => failures.push(format!("the queue still holds {n} unresolved jobs")),
            Err(error) => failures.push(format!("the queue's operations route: {error}")),
        }
        failures
    }
}

fn account(ledger: &Ledger, ops: SocketAddr) -> Accounting {
    let acked = &ledger.events_acked;
    let events_missing = [
        ("the consumer that stays", &ledger.live_consumer),
        ("the consumer away half the time", &ledger.away_consumer),
        ("the upstream mosquitto", &ledger.upstream),
    ]
    .into_iter()
    .map(|(name, set)| {
        let (count, first) = acked.missing_from(&[set], MISSING_SHOWN);
        (name, count, first)
    })
    .collect();
    Accounting {
        events_acked: acked.len(),
        events_missing,
        jobs_acked: ledger.jobs_acked.len(),
        jobs_done: ledger.jobs_done.len(),
        dead_letters: ledger.dead_letters.len(),
        jobs_missing: ledger
            .jobs_acked
            .missing_from(&[&ledger.jobs_done, &ledger.dead_letters], MISSING_SHOWN),
        jobs_unresolved: unresolved_jobs(ops),
    }
}

/// The queue's `unresolved` count from its operations route.
fn unresolved_jobs(ops: SocketAddr) -> Result<u64, String> {
    let path = format!("/v1/operations/queues/{}", profile::QUEUE_NAME);
    let body = crate::scrape::get_body(ops, &path)?;
    let (_, rest) = body
        .split_once("\"unresolved\":")
        .ok_or_else(|| format!("{path}: no \"unresolved\" in {body:?}"))?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .map_err(|_| format!("{path}: unreadable \"unresolved\" in {body:?}"))
}

/// A new subscriber's state pass holds, for every sensor, a value at least
/// as new as the last its publisher had acknowledged; the number of
/// sensors checked.
fn check_states(shared: &Shared, endpoint: crate::client::Endpoint) -> Result<usize, String> {
    let acked = shared.ledger.acked_states();
    let expected = acked.iter().filter(|&&sequence| sequence > 0).count();
    let options = ClientOptions {
        version: ProtocolVersion::V5,
        keep_alive_s: 0,
        receive_maximum: Some(100),
    };
    let mut client = Client::connect_to(&endpoint, "soak-state-check", &options)?;
    client.subscribe("state/#", QoS::AtLeastOnce)?;
    let mut seen = vec![0u64; acked.len()];
    let mut found = 0;
    let deadline = Instant::now() + STATE_PASS_TIMEOUT;
    while found < expected {
        while let Some(packet) = client.next_packet()? {
            if let Packet::Publish(value) = packet {
                let sensor = value
                    .topic
                    .strip_prefix("state/s")
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| n < seen.len());
                if let (Some(sensor), Some(sequence)) = (sensor, payload_id(&value.payload)) {
                    if seen[sensor] == 0 && acked[sensor] > 0 {
                        found += 1;
                    }
                    seen[sensor] = seen[sensor].max(sequence);
                }
                if let Some(id) = value.packet_id {
                    client.queue_puback(id);
                }
            }
        }
        client.flush()?;
        if Instant::now() > deadline {
            return Err(format!(
                "the state pass gave {found} of {expected} sensors' values in {STATE_PASS_TIMEOUT:?}"
            ));
        }
        client.fill()?;
    }
    client.disconnect();
    let stale: Vec<usize> = (0..acked.len()).filter(|&s| seen[s] < acked[s]).collect();
    if stale.is_empty() {
        Ok(expected)
    } else {
        Err(format!(
            "{} sensors' state is older than what their publishers had acknowledged (first: {:?})",
            stale.len(),
            &stale[..stale.len().min(MISSING_SHOWN)]
        ))
    }
}
