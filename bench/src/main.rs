//! `saguin-bench`: saguin against mosquitto on this machine, same load,
//! same bounds, alternating runs; medians, ratios and a footprint section,
//! optionally written to BENCHMARKS.md.
//!
//!     cargo build --release --workspace
//!     target/release/saguin-bench [--quick] [--write BENCHMARKS.md]
//!
//! All traffic stays on 127.0.0.1; every loop is bounded in count and time.

mod acl_figure;
mod auth_storm;
mod bridge;
mod brokers;
mod client;
mod footprint;
mod handshakes;
mod load;
mod machine;
mod open_files;
mod queue;
mod report;
mod scale;
mod scrape;
mod soak;
mod startup;
mod stock;
mod storm;
mod tls;
mod worst_case;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use saguin::codec::QoS;

use brokers::{
    BenchDoor, Broker, BrokerBinaries, BrokerKind, SaguinSetup, TempDir, DURABLE_FILTER,
};
use footprint::{BinarySize, MemorySample, IDLE_CLIENTS};
use load::{
    Latency, Throughput, Topics, END_TO_END_WINDOW_MESSAGES, PAYLOAD_BYTES, QOS1_WINDOW_MESSAGES,
};
use report::{Better, PairRow, Row, Sample, Unit};
use startup::StartupFigure;

const USAGE: &str = "\
usage: saguin-bench soak [...]   the soak (saguin-bench soak --help)
       saguin-bench worst-case --board FILE [--scale F]   the memory driver on a board profile
       saguin-bench [--quick] [--write FILE] [--only LIST] [--saguin-bin PATH] [--baseline-bin PATH]
                    [--connections N] [--storm-rate N]
  --quick              fewer messages and a 3 s latency run (a smoke test, not for BENCHMARKS.md)
  --write FILE         also write the report to FILE (BENCHMARKS.md)
  --only LIST          comma-separated figures to run: 1,2,3,4,5,6,7,8,9,11,12,13,14,15,16,footprint
                       (default: all; 9 is figures 9 and 10)
  --saguin-bin PATH    the broker binary (default: saguin beside this executable)
  --baseline-bin PATH  another saguin binary (an older commit's) run beside it in figures 1 to 7,
                       with the same configuration, and a new / baseline column
  --connections N      idle connections in figure 16a (default 10000; --quick: 1000)
  --storm-rate N       new connections a second in figure 16's 3 s storms (default 1000; --quick: 300)";

/// Pause between runs, so the broker has finished closing the last run's
/// sessions before the next one starts.
pub(crate) const BETWEEN_RUNS: Duration = Duration::from_millis(300);
const FAN_CLIENTS: usize = 10;
/// Publishers in figure 6b, where concurrent publishes share commits.
const DURABLE_PUBLISHERS: usize = 8;
const LATENCY_RATE_PER_S: u32 = 2000;
/// Warm-up runs carry this fraction of a figure's messages.
const WARMUP_DIVISOR: u64 = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Figure {
    Qos0,
    Qos1,
    FanOut,
    FanIn,
    Latency,
    Durable,
    Queue,
    AuthStorm,
    Stock,
    Bridge,
    Acl,
    Tls,
    Operations,
    Doors,
    Scale,
    Footprint,
}

impl Figure {
    const ALL: [Figure; 16] = [
        Figure::Qos0,
        Figure::Qos1,
        Figure::FanOut,
        Figure::FanIn,
        Figure::Latency,
        Figure::Durable,
        Figure::Queue,
        Figure::AuthStorm,
        Figure::Stock,
        Figure::Bridge,
        Figure::Acl,
        Figure::Tls,
        Figure::Operations,
        Figure::Doors,
        Figure::Scale,
        Figure::Footprint,
    ];

    fn parse(name: &str) -> Option<Figure> {
        Figure::ALL.into_iter().find(|f| f.name() == name)
    }

    fn name(self) -> &'static str {
        match self {
            Figure::Qos0 => "1",
            Figure::Qos1 => "2",
            Figure::FanOut => "3",
            Figure::FanIn => "4",
            Figure::Latency => "5",
            Figure::Durable => "6",
            Figure::Queue => "7",
            Figure::AuthStorm => "8",
            Figure::Stock => "9",
            Figure::Bridge => "11",
            Figure::Acl => "12",
            Figure::Tls => "13",
            Figure::Operations => "14",
            Figure::Doors => "15",
            Figure::Scale => "16",
            Figure::Footprint => "footprint",
        }
    }
}

struct Options {
    quick: bool,
    write_path: Option<PathBuf>,
    figures: Vec<Figure>,
    saguin_bin: Option<PathBuf>,
    baseline_bin: Option<PathBuf>,
    /// Figure 16a's idle connections, where given.
    idle_connections: Option<usize>,
    /// Figure 16's storm rate, where given.
    storm_rate_per_s: Option<u32>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        quick: false,
        write_path: None,
        figures: Figure::ALL.to_vec(),
        saguin_bin: None,
        baseline_bin: None,
        idle_connections: None,
        storm_rate_per_s: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--write" => options.write_path = Some(value("--write")?.into()),
            "--saguin-bin" => options.saguin_bin = Some(value("--saguin-bin")?.into()),
            "--baseline-bin" => options.baseline_bin = Some(value("--baseline-bin")?.into()),
            "--connections" => options.idle_connections = Some(positive(&value("--connections")?)?),
            "--storm-rate" => {
                let rate = positive(&value("--storm-rate")?)?;
                options.storm_rate_per_s = Some(
                    u32::try_from(rate).map_err(|_| format!("--storm-rate {rate}: too large"))?,
                )
            }
            "--only" => {
                options.figures = value("--only")?
                    .split(',')
                    .map(|name| Figure::parse(name).ok_or(format!("no figure {name:?}")))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unrecognised argument {other:?}")),
        }
    }
    Ok(options)
}

/// A count above zero, from a flag's value.
fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{value:?}: give a whole number above 0")),
    }
}

/// How much each figure sends; `--quick` is a smoke test of the harness.
struct Plan {
    runs_per_broker: usize,
    qos0_messages: u64,
    qos1_messages: u64,
    fan_out_publishes: u64,
    fan_in_messages_per_publisher: u64,
    latency_duration: Duration,
    /// Figure 6a, one publisher.
    durable_messages: u64,
    /// Figure 6b, each of `DURABLE_PUBLISHERS`.
    durable_messages_per_publisher: u64,
    /// Figure 6a with a commit per publish, whose rate is one fsync's.
    durable_per_publish_messages: u64,
    /// Records in the redb channel of the start-up figure.
    startup_records: u64,
    /// Jobs in figure 7's backlog for a rate.
    queue_rate_jobs: u64,
    /// Fewer messages everywhere: a smoke test.
    quick: bool,
    /// Records in figure 11's backlog, forwarded upstream by a bridge.
    bridge_backlog_records: u64,
    /// Connections made in one run of figure 13's handshake rate.
    handshakes: usize,
    /// Figure 16.
    scale: scale::ScalePlan,
}

impl Plan {
    fn new(options: &Options) -> Plan {
        let quick = options.quick;
        let runs_per_broker = if quick { 3 } else { 5 };
        let scale = scale::ScalePlan::new(
            runs_per_broker,
            quick,
            options.idle_connections,
            options.storm_rate_per_s,
        );
        if quick {
            Plan {
                runs_per_broker,
                qos0_messages: 20_000,
                qos1_messages: 20_000,
                fan_out_publishes: 5_000,
                fan_in_messages_per_publisher: 2_000,
                latency_duration: Duration::from_secs(3),
                durable_messages: 5_000,
                durable_messages_per_publisher: 1_000,
                durable_per_publish_messages: 2_000,
                startup_records: 100_000,
                queue_rate_jobs: 500,
                quick,
                bridge_backlog_records: 10_000,
                handshakes: 400,
                scale,
            }
        } else {
            Plan {
                runs_per_broker,
                qos0_messages: 200_000,
                qos1_messages: 200_000,
                fan_out_publishes: 50_000,
                fan_in_messages_per_publisher: 20_000,
                latency_duration: Duration::from_secs(10),
                durable_messages: 200_000,
                durable_messages_per_publisher: 25_000,
                durable_per_publish_messages: 10_000,
                startup_records: 1_000_000,
                queue_rate_jobs: 3_000,
                quick,
                bridge_backlog_records: 100_000,
                handshakes: 2_000,
                scale,
            }
        }
    }

    fn throughput_load(&self, figure: Figure) -> Option<Throughput> {
        let (qos, publishers, subscribers, messages_per_publisher) = match figure {
            Figure::Qos0 => (QoS::AtMostOnce, 1, 1, self.qos0_messages),
            Figure::Qos1 => (QoS::AtLeastOnce, 1, 1, self.qos1_messages),
            Figure::FanOut => (QoS::AtLeastOnce, 1, FAN_CLIENTS, self.fan_out_publishes),
            Figure::FanIn => (
                QoS::AtLeastOnce,
                FAN_CLIENTS,
                1,
                self.fan_in_messages_per_publisher,
            ),
            Figure::Latency
            | Figure::Durable
            | Figure::Queue
            | Figure::AuthStorm
            | Figure::Stock
            | Figure::Bridge
            | Figure::Acl
            | Figure::Tls
            | Figure::Operations
            | Figure::Doors
            | Figure::Scale
            | Figure::Footprint => return None,
        };
        Some(Throughput {
            qos,
            publishers,
            subscribers,
            messages_per_publisher,
            topics: Topics::PerRun,
        })
    }

    /// Figure 6's loads: QoS 1 to `durable/<run>`, one subscriber of
    /// `durable/#`.
    fn durable_load(&self, publishers: usize, messages_per_publisher: u64) -> Throughput {
        Throughput {
            qos: QoS::AtLeastOnce,
            publishers,
            subscribers: 1,
            messages_per_publisher,
            topics: Topics::Durable,
        }
    }
}

/// When the figures were taken and how busy the machine was.
struct RunContext {
    started_at: String,
    load_before: String,
    load_after: String,
}

/// Every figure's rows, filled as runs complete.
struct Results {
    figures: Vec<Row>,
    broker_cpu: Vec<Row>,
    binary_sizes: Vec<BinarySize>,
    memory: Vec<Row>,
    memory_note: Option<String>,
    startup: Option<StartupFigure>,
    /// Figure 12: saguin with and without an acl_file.
    acl: Vec<PairRow>,
}

fn figure_label(figure: Figure) -> &'static str {
    match figure {
        Figure::Qos0 => "1. broadcast QoS 0, 1 → 1, 64 B",
        Figure::Qos1 => "2. broadcast QoS 1, 1 → 1, 64 B",
        Figure::FanOut => "3. fan-out QoS 1, 1 → 10 subscribers: deliveries/s",
        Figure::FanIn => "4. fan-in QoS 1, 10 publishers → 1",
        Figure::Latency
        | Figure::Durable
        | Figure::Queue
        | Figure::AuthStorm
        | Figure::Stock
        | Figure::Bridge
        | Figure::Acl
        | Figure::Tls
        | Figure::Operations
        | Figure::Doors
        | Figure::Scale
        | Figure::Footprint => "",
    }
}

const DURABLE_1_LABEL: &str =
    "6a. durable append QoS 1, 1 → 1, 64 B (saguin: redb, PUBACK after fsync; mosquitto: not durable)";
const DURABLE_8_LABEL: &str =
    "6b. durable append QoS 1, 8 publishers → 1, 64 B (saguin: redb; mosquitto: not durable)";
const DURABLE_PER_PUBLISH_LABEL: &str =
    "6a with `publish_commit_interval: none` (a commit per publish), saguin only";
const TLS_QOS1_LABEL: &str = "13a. TLS: broadcast QoS 1, 1 → 1, 64 B";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("soak") {
        return soak::main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("worst-case") {
        return worst_case::main(&args[1..]);
    }
    let options = match parse_args(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let binaries = match broker_binaries(options.saguin_bin.clone(), options.baseline_bin.clone()) {
        Ok(binaries) => binaries,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let plan = Plan::new(&options);
    let started_at = machine::utc_now();
    let load_before = machine::load_average_1min();
    let mut results = Results {
        figures: Vec::new(),
        broker_cpu: Vec::new(),
        binary_sizes: Vec::new(),
        memory: Vec::new(),
        memory_note: None,
        startup: None,
        acl: Vec::new(),
    };
    if let Err(message) = run_traffic_figures(&options.figures, &plan, &binaries, &mut results) {
        eprintln!("cannot run the traffic figures: {message}");
        return ExitCode::FAILURE;
    }
    if options.figures.contains(&Figure::Footprint) {
        run_footprint(&plan, options.quick, &binaries, &mut results);
    }
    let run_context = RunContext {
        started_at,
        load_before,
        load_after: machine::load_average_1min(),
    };
    let document = render_document(&options, &plan, &binaries, &run_context, &results);
    println!("\n{document}");
    if let Some(path) = &options.write_path {
        // The soak writes its own section; a bench run keeps it.
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let document = match soak::section_of(&old) {
            Some(section) => soak::with_section(&document, section),
            None => document,
        };
        // So does the worst-case driver (`make bench` runs it after).
        let document = match worst_case::section_of(&old) {
            Some(section) => worst_case::with_section(&document, section),
            None => document,
        };
        if let Err(error) = std::fs::write(path, &document) {
            eprintln!("cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// saguin beside this executable (both come out of `cargo build --release
/// --workspace`), unless given; mosquitto where Debian installs it.
fn broker_binaries(
    saguin_bin: Option<PathBuf>,
    baseline: Option<PathBuf>,
) -> Result<BrokerBinaries, String> {
    let saguin = match saguin_bin {
        Some(path) => path,
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this executable: {e}"))?
            .with_file_name("saguin"),
    };
    let mosquitto = PathBuf::from("/usr/sbin/mosquitto");
    for path in [&saguin, &mosquitto].into_iter().chain(&baseline) {
        if !path.exists() {
            return Err(format!(
                "{} not found (cargo build --release --workspace; apt-get install mosquitto)",
                path.display()
            ));
        }
    }
    Ok(BrokerBinaries {
        saguin,
        mosquitto,
        baseline,
    })
}

/// Figures 1 to 5 on one pair of brokers, started once and kept.
fn run_traffic_figures(
    figures: &[Figure],
    plan: &Plan,
    binaries: &BrokerBinaries,
    results: &mut Results,
) -> Result<(), String> {
    let wanted = |f: Figure| figures.contains(&f);
    let any_traffic = figures.iter().any(|f| {
        matches!(
            f,
            Figure::Qos0 | Figure::Qos1 | Figure::FanOut | Figure::FanIn | Figure::Latency
        )
    });
    let mut brokers = Vec::new();
    if any_traffic {
        for kind in binaries.saguins_then(&[BrokerKind::Mosquitto]) {
            let broker = Broker::start(kind, binaries)?;
            println!(
                "{kind} listening on {} (pid {})",
                broker.address,
                broker.pid()
            );
            brokers.push(broker);
        }
    }
    let ticks_per_s = machine::clock_ticks_per_s();
    for figure in [Figure::Qos0, Figure::Qos1, Figure::FanOut, Figure::FanIn] {
        let load = plan.throughput_load(figure).expect("a throughput figure");
        if !wanted(figure) {
            continue;
        }
        let (rate, cpu) = run_throughput_figure(
            figure_label(figure),
            figure.name(),
            &load,
            plan,
            &brokers,
            ticks_per_s,
        );
        results.figures.push(rate);
        if figure == Figure::FanOut {
            let per_publish = results.figures[results.figures.len() - 1].derived(
                "3. fan-out QoS 1, 1 → 10 subscribers: publishes/s",
                |deliveries| deliveries / FAN_CLIENTS as f64,
            );
            results.figures.push(per_publish);
        }
        results.broker_cpu.push(cpu);
    }
    if wanted(Figure::Latency) {
        let load = Latency {
            rate_per_s: LATENCY_RATE_PER_S,
            duration: plan.latency_duration,
        };
        results
            .figures
            .extend(run_latency_figure("5. latency", "5", &load, plan, &brokers));
    }
    for broker in brokers {
        broker.stop();
    }
    if wanted(Figure::Durable) {
        run_durable_figure(plan, binaries, ticks_per_s, results)?;
    }
    if wanted(Figure::Queue) {
        run_queue_figure(plan, binaries, results)?;
    }
    if wanted(Figure::AuthStorm) {
        run_auth_storm_figure(plan, binaries, results)?;
    }
    if wanted(Figure::Stock) {
        let stock = stock::StockPlan::new(plan.runs_per_broker, plan.quick);
        results
            .figures
            .extend(stock::run_figures(&stock, binaries)?);
    }
    if wanted(Figure::Bridge) {
        run_bridge_figure(plan, binaries, results);
    }
    if wanted(Figure::Acl) {
        run_acl_figure(plan, binaries, ticks_per_s, results)?;
    }
    if wanted(Figure::Tls) {
        run_tls_figure(plan, binaries, ticks_per_s, results)?;
    }
    if wanted(Figure::Operations) {
        let load = plan.throughput_load(Figure::Qos1).expect("figure 2's load");
        run_operations_figure(plan, &load, binaries, results);
    }
    if wanted(Figure::Doors) {
        run_doors_figure(plan, binaries, ticks_per_s, results)?;
    }
    if wanted(Figure::Scale) {
        results
            .figures
            .extend(scale::run_figure(&plan.scale, binaries)?);
    }
    Ok(())
}

/// Figure 15: saguin and mosquitto on their other doors: figure 2's load
/// over WebSocket and over a Unix socket, and what an idle WebSocket
/// connection holds beside an idle TCP one.
fn run_doors_figure(
    plan: &Plan,
    binaries: &BrokerBinaries,
    ticks_per_s: u64,
    results: &mut Results,
) -> Result<(), String> {
    let load = plan
        .throughput_load(Figure::Qos1)
        .expect("a throughput figure");
    let doors = [
        (
            BenchDoor::WebSocket,
            "15a",
            "15a. WebSocket: broadcast QoS 1, 1 → 1, 64 B",
        ),
        (
            BenchDoor::Unix,
            "15b",
            "15b. Unix socket: broadcast QoS 1, 1 → 1, 64 B",
        ),
    ];
    for (door, tag, label) in doors {
        let mut brokers = Vec::new();
        for kind in BrokerKind::BOTH {
            let broker = Broker::start_door(kind, binaries, door)?;
            println!("{kind} serving {door:?} (pid {})", broker.pid());
            brokers.push(broker);
        }
        let (rate, cpu) = run_throughput_figure(label, tag, &load, plan, &brokers, ticks_per_s);
        results.figures.push(rate);
        results.broker_cpu.push(cpu);
        for broker in brokers {
            broker.stop();
        }
    }
    if let Some(blocker) = footprint::memory_figure_blocker() {
        println!("   15c: {blocker}");
        return Ok(());
    }
    println!("\n== 15c. resident memory per idle connection, WebSocket and TCP");
    let mut rows = [
        Row::new(
            format!("15c. per idle WebSocket connection: (with {IDLE_CLIENTS} − idle) / {IDLE_CLIENTS}"),
            Unit::Bytes,
            Better::Lower,
        ),
        Row::new(
            format!("15d. per idle TCP connection, the same runs' way: (with {IDLE_CLIENTS} − idle) / {IDLE_CLIENTS}"),
            Unit::Bytes,
            Better::Lower,
        ),
    ];
    for run in 1..=plan.runs_per_broker {
        for kind in BrokerKind::BOTH {
            for (row, door) in rows.iter_mut().zip([Some(BenchDoor::WebSocket), None]) {
                let label = format!("d{run}{kind}{}", if door.is_some() { "w" } else { "t" });
                let prefix = format!("   memory run {run} {kind:<9} {door:?}");
                match footprint::measure_memory(kind, binaries, door, &label) {
                    Ok(sample) => {
                        print_memory_sample(&prefix, &sample);
                        row.push(kind, Sample::Value(sample.per_connection_bytes()));
                    }
                    Err(failure) => {
                        println!("{prefix} FAILED: {failure}");
                        row.push(kind, Sample::Failed(failure));
                    }
                }
            }
        }
    }
    results.figures.extend(rows);
    Ok(())
}

/// Figure 12, saguin alone: figure 2's load logged in, with a large
/// acl_file and without it.
fn run_acl_figure(
    plan: &Plan,
    binaries: &BrokerBinaries,
    ticks_per_s: u64,
    results: &mut Results,
) -> Result<(), String> {
    let load = plan
        .throughput_load(Figure::Qos1)
        .expect("a throughput figure");
    let warmup = warmup_load(&load);
    let rows = acl_figure::run(binaries, &load, &warmup, plan.runs_per_broker, ticks_per_s)?;
    results.acl.extend(rows);
    Ok(())
}

/// Figure 13: saguin and mosquitto serving one certificate over TLS:
/// figure 2's throughput, figure 5's latency, and full handshakes a second.
fn run_tls_figure(
    plan: &Plan,
    binaries: &BrokerBinaries,
    ticks_per_s: u64,
    results: &mut Results,
) -> Result<(), String> {
    let dir = TempDir::new("tls")?;
    let served = tls::make_server_certificate(dir.path())?;
    let client = tls::client_config(&served.authority)?;
    let mut brokers = Vec::new();
    for kind in BrokerKind::BOTH {
        let broker = Broker::start_tls(kind, binaries, &served, client.clone())?;
        println!(
            "{kind} serving TLS on {} (pid {})",
            broker.address,
            broker.pid()
        );
        brokers.push(broker);
    }
    let load = plan
        .throughput_load(Figure::Qos1)
        .expect("a throughput figure");
    let (rate, cpu) =
        run_throughput_figure(TLS_QOS1_LABEL, "13a", &load, plan, &brokers, ticks_per_s);
    results.figures.push(rate);
    results.broker_cpu.push(cpu);
    let latency = Latency {
        rate_per_s: LATENCY_RATE_PER_S,
        duration: plan.latency_duration,
    };
    let mut latency_rows = run_latency_figure("13b. TLS: latency", "13b", &latency, plan, &brokers);
    // The p99 is the figure asked for; the p50 is kept beside it.
    results.figures.append(&mut latency_rows);
    let title = format!(
        "13c. TLS: full handshakes a second (TCP connect, handshake, CONNECT/CONNACK, DISCONNECT; {} threads)",
        handshakes::THREADS
    );
    println!("\n== {title}");
    let mut rows = [Row::new(title, Unit::ConnectionsPerS, Better::Higher)];
    alternate_runs(plan, &brokers, &mut rows, |broker, run| {
        let label = format!("f13r{run}{}", broker.kind);
        let rate = handshakes::rate(&broker.endpoint(), plan.handshakes, &label)?;
        Ok(([rate], format!("{rate:.0} connections/s")))
    });
    results.figures.extend(rows);
    for broker in brokers {
        broker.stop();
    }
    Ok(())
}

/// Figure 14, saguin alone: broadcast QoS 1 throughput (figure 2's load)
/// without the operations listener and with `/metrics` asked for every
/// second, alternating run by run on fresh brokers; and one computed
/// scrape's time at 1,000 connected clients and 100 channels.
fn run_operations_figure(
    plan: &Plan,
    load: &load::Throughput,
    binaries: &BrokerBinaries,
    results: &mut Results,
) {
    println!("\n== 14. the operations listener's cost");
    let mut off = Row::new(
        "14a. broadcast QoS 1, 1 → 1: messages/s, no operations listener",
        Unit::MessagesPerS,
        Better::Higher,
    );
    let mut on = Row::new(
        "14b. broadcast QoS 1, 1 → 1: messages/s, /metrics scraped every second",
        Unit::MessagesPerS,
        Better::Higher,
    );
    let mut time = Row::new(
        format!(
            "14c. one computed /metrics scrape, {} clients connected, {} channels",
            scrape::SCRAPE_CLIENTS,
            scrape::SCRAPE_CHANNELS
        ),
        Unit::Milliseconds,
        Better::Lower,
    );
    for run in 1..=plan.runs_per_broker {
        for (scraped, row) in [(false, &mut off), (true, &mut on)] {
            let label = format!("ops{run}{}", if scraped { "s" } else { "" });
            let sample = scrape::throughput(binaries, load, &label, scraped);
            println!("   run {run}, scraped {scraped}: {sample:?}");
            row.push(
                BrokerKind::Saguin,
                sample.map_or_else(Sample::Failed, Sample::Value),
            );
        }
        let sample = scrape::scrape_time(binaries, &format!("ops{run}t"));
        println!("   run {run}, scrape time: {sample:?}");
        time.push(
            BrokerKind::Saguin,
            sample.map_or_else(Sample::Failed, |d| Sample::Value(d.as_secs_f64() * 1e3)),
        );
    }
    for mut row in [off, on, time] {
        row.saguin_only = true;
        results.figures.push(row);
    }
}

/// Figure 11, saguin alone: records/s a bridge forwards upstream to a
/// mosquitto peer from a backlog stored while the peer was paused, and the
/// time to drain it.
fn run_bridge_figure(plan: &Plan, binaries: &BrokerBinaries, results: &mut Results) {
    let records = plan.bridge_backlog_records;
    let count = report::with_thousands(records as f64);
    println!("\n== 9. bridge draining a {count}-record backlog upstream to mosquitto");
    let mut rate = Row::new(
        format!("11a. bridge: records/s forwarded upstream to mosquitto from a {count}-record backlog, one topic"),
        Unit::MessagesPerS,
        Better::Higher,
    );
    let mut drain = Row::new(
        format!("11b. bridge: time to drain a {count}-record backlog upstream"),
        Unit::Milliseconds,
        Better::Lower,
    );
    for run in 1..=plan.runs_per_broker {
        let sample = bridge::drain_upstream(binaries, records);
        println!("   run {run}: {sample:?}");
        let (r, d) = match sample {
            Ok(elapsed) => (
                Sample::Value(records as f64 / elapsed.as_secs_f64()),
                Sample::Value(elapsed.as_secs_f64() * 1e3),
            ),
            Err(failure) => (Sample::Failed(failure.clone()), Sample::Failed(failure)),
        };
        rate.push(BrokerKind::Saguin, r);
        drain.push(BrokerKind::Saguin, d);
    }
    for mut row in [rate, drain] {
        row.saguin_only = true;
        results.figures.push(row);
    }
}

/// Figure 8: both brokers checking one password file, refusing
/// `STORM_CONNECTS` wrong passwords while a bystander publishes.
fn run_auth_storm_figure(
    plan: &Plan,
    binaries: &BrokerBinaries,
    results: &mut Results,
) -> Result<(), String> {
    let title = format!(
        "8. {} wrong-password CONNECTs ($7$, 101 iterations)",
        report::with_thousands(auth_storm::STORM_CONNECTS as f64)
    );
    let refuse = Row::new(
        format!("{title}: time to refuse all"),
        Unit::Milliseconds,
        Better::Lower,
    );
    let bystander = Row::new(
        format!("{title}: a bystander's QoS 1 PUBACK p99 meanwhile"),
        Unit::Microseconds,
        Better::Lower,
    );
    let mut brokers = Vec::new();
    for kind in BrokerKind::BOTH {
        brokers.push(Broker::start_with(kind, binaries, SaguinSetup::Passwords)?);
    }
    println!("\n== {title}");
    let mut rows = [refuse, bystander];
    let connects = auth_storm::STORM_CONNECTS;
    alternate_runs(plan, &brokers, &mut rows, |broker, run| {
        storm_run(broker, &format!("f8r{run}{}", broker.kind), connects)
    });
    for broker in brokers {
        broker.stop();
    }
    results.figures.extend(rows);

    // mosquitto 2.1's argon2id, which Debian's mosquitto 2.0 cannot read:
    // saguin alone, its hash made by `saguin --passwd --argon2id` at 2.1's
    // costs (46 MiB, one pass, one lane).
    let connects = auth_storm::ARGON2ID_STORM_CONNECTS;
    let title = format!(
        "8. {} wrong-password CONNECTs ($argon2id$, 46 MiB, t=1: mosquitto 2.1's costs)",
        report::with_thousands(connects as f64)
    );
    let mut rows = [
        Row::new(
            format!("{title}: time to refuse all"),
            Unit::Milliseconds,
            Better::Lower,
        ),
        Row::new(
            format!("{title}: a bystander's QoS 1 PUBACK p99 meanwhile"),
            Unit::Microseconds,
            Better::Lower,
        ),
    ];
    let saguin = [Broker::start_with(
        BrokerKind::Saguin,
        binaries,
        SaguinSetup::PasswordsArgon2id,
    )?];
    println!("\n== {title}");
    alternate_runs(plan, &saguin, &mut rows, |broker, run| {
        storm_run(broker, &format!("f8ar{run}{}", broker.kind), connects)
    });
    for broker in saguin {
        broker.stop();
    }
    for mut row in rows {
        row.saguin_only = true;
        results.figures.push(row);
    }
    Ok(())
}

/// One run of figure 8 against `broker`: both of its figures and a line.
fn storm_run(broker: &Broker, label: &str, connects: usize) -> Result<([f64; 2], String), String> {
    let outcome = auth_storm::run_storm(broker.address, label, connects);
    match outcome.failure {
        Some(failure) => Err(failure),
        None => Ok((
            [outcome.refuse_all_ms, outcome.bystander_p99_us],
            format!(
                "refused all in {:.0} ms; bystander p99 {:.0} µs over {} publishes",
                outcome.refuse_all_ms, outcome.bystander_p99_us, outcome.bystander_samples
            ),
        )),
    }
}

/// Runs `measure` on each broker in turn, `plan.runs_per_broker` times.
/// A run gives one value for each of `rows` and a line to print, or why
/// it failed, which every row records.
fn alternate_runs<const N: usize>(
    plan: &Plan,
    brokers: &[Broker],
    rows: &mut [Row; N],
    mut measure: impl FnMut(&Broker, usize) -> Result<([f64; N], String), String>,
) {
    for run in 1..=plan.runs_per_broker {
        for broker in brokers {
            let prefix = format!("   run {run} {:<9}", broker.kind);
            match measure(broker, run) {
                Err(failure) => {
                    println!("{prefix} FAILED: {failure}");
                    for row in rows.iter_mut() {
                        row.push(broker.kind, Sample::Failed(failure.clone()));
                    }
                }
                Ok((values, line)) => {
                    println!("{prefix} {line}");
                    for (row, value) in rows.iter_mut().zip(values) {
                        row.push(broker.kind, Sample::Value(value));
                    }
                }
            }
            std::thread::sleep(BETWEEN_RUNS);
        }
    }
}

/// Jobs in figure 7's backlog: the 300 the drain is known by, and more
/// for a rate.
const QUEUE_DRAIN_JOBS: u64 = 300;

/// Figure 7, saguin alone (mosquitto has no queue): how long one worker
/// takes to drain a 300-job backlog, and jobs/s drained by 1 and 4 workers.
fn run_queue_figure(
    plan: &Plan,
    binaries: &BrokerBinaries,
    results: &mut Results,
) -> Result<(), String> {
    let mut brokers = Vec::new();
    for kind in binaries.saguins_then(&[]) {
        let broker = Broker::start_with(kind, binaries, SaguinSetup::Queue)?;
        println!(
            "\n== 7. queue on redb ({kind} {}, pid {})",
            broker.address,
            broker.pid()
        );
        brokers.push(broker);
    }
    let rate_jobs = plan.queue_rate_jobs;
    let mut drain_row = Row::new(
        "7a. queue: one worker drains a 300-job backlog",
        Unit::Milliseconds,
        Better::Lower,
    );
    let mut rates = [(1usize, "7b"), (4, "7c")].map(|(workers, tag)| {
        (
            workers,
            Row::new(
                format!(
                    "{tag}. queue: jobs/s drained by {workers} worker(s), {rate_jobs}-job backlog"
                ),
                Unit::MessagesPerS,
                Better::Higher,
            ),
        )
    });
    for run in 1..=plan.runs_per_broker {
        for broker in &brokers {
            let kind = broker.kind;
            let tag = format!("q{run}");
            let sample = queue::fill_backlog(broker.address, &tag, QUEUE_DRAIN_JOBS)
                .and_then(|()| queue::drain(broker.address, &tag, QUEUE_DRAIN_JOBS, 1));
            println!("   run {run} {kind:<9} drain 300, 1 worker: {sample:?}");
            drain_row.push(
                kind,
                match sample {
                    Ok(elapsed) => Sample::Value(elapsed.as_secs_f64() * 1e3),
                    Err(failure) => Sample::Failed(failure),
                },
            );
            for (workers, row) in &mut rates {
                let tag = format!("q{run}w{workers}");
                let sample = queue::fill_backlog(broker.address, &tag, rate_jobs)
                    .and_then(|()| queue::drain(broker.address, &tag, rate_jobs, *workers));
                println!(
                    "   run {run} {kind:<9} drain {rate_jobs}, {workers} worker(s): {sample:?}"
                );
                row.push(
                    kind,
                    match sample {
                        Ok(elapsed) => Sample::Value(rate_jobs as f64 / elapsed.as_secs_f64()),
                        Err(failure) => Sample::Failed(failure),
                    },
                );
            }
        }
    }
    for broker in brokers {
        broker.stop();
    }
    drain_row.saguin_only = true;
    results.figures.push(drain_row);
    for (_, mut row) in rates {
        row.saguin_only = true;
        results.figures.push(row);
    }
    Ok(())
}

/// Figure 6 on brokers of its own: saguin with `durable/#` claimed by an
/// append channel on redb against mosquitto's plain QoS 1 (6a, 6b), then
/// a saguin whose redb commits each publish alone (6a again).
fn run_durable_figure(
    plan: &Plan,
    binaries: &BrokerBinaries,
    ticks_per_s: u64,
    results: &mut Results,
) -> Result<(), String> {
    let start = |kind: BrokerKind, setup: SaguinSetup| -> Result<Broker, String> {
        let broker = Broker::start_with(kind, binaries, setup)?;
        let setup = match kind {
            BrokerKind::Saguin | BrokerKind::Baseline => format!(" ({setup:?})"),
            BrokerKind::Mosquitto => String::new(),
        };
        println!(
            "{kind}{setup} listening on {} (pid {})",
            broker.address,
            broker.pid()
        );
        Ok(broker)
    };
    let brokers = binaries
        .saguins_then(&[BrokerKind::Mosquitto])
        .into_iter()
        .map(|kind| start(kind, SaguinSetup::GroupCommit))
        .collect::<Result<Vec<_>, _>>()?;
    let figures = [
        (
            DURABLE_1_LABEL,
            "6a",
            plan.durable_load(1, plan.durable_messages),
        ),
        (
            DURABLE_8_LABEL,
            "6b",
            plan.durable_load(DURABLE_PUBLISHERS, plan.durable_messages_per_publisher),
        ),
    ];
    for (label, tag, load) in &figures {
        let (rate, cpu) = run_throughput_figure(label, tag, load, plan, &brokers, ticks_per_s);
        results.figures.push(rate);
        results.broker_cpu.push(cpu);
    }
    for broker in brokers {
        broker.stop();
    }
    let per_publish = binaries
        .saguins_then(&[])
        .into_iter()
        .map(|kind| start(kind, SaguinSetup::CommitPerPublish))
        .collect::<Result<Vec<_>, _>>()?;
    let load = plan.durable_load(1, plan.durable_per_publish_messages);
    let (mut rate, mut cpu) = run_throughput_figure(
        DURABLE_PER_PUBLISH_LABEL,
        "6c",
        &load,
        plan,
        &per_publish,
        ticks_per_s,
    );
    rate.saguin_only = true;
    cpu.saguin_only = true;
    results.figures.push(rate);
    results.broker_cpu.push(cpu);
    for broker in per_publish {
        broker.stop();
    }
    Ok(())
}

/// One warm-up per broker, then alternating measured runs. `tag` keeps
/// the runs' client ids and topics apart from other figures'.
fn run_throughput_figure(
    label: &str,
    tag: &str,
    load: &Throughput,
    plan: &Plan,
    brokers: &[Broker],
    ticks_per_s: u64,
) -> (Row, Row) {
    let mut rate_row = Row::new(label, Unit::MessagesPerS, Better::Higher);
    let mut cpu_row = Row::new(label, Unit::Microseconds, Better::Lower);
    println!("\n== {label}");
    let warmup = warmup_load(load);
    for broker in brokers {
        let outcome = load::run_throughput(
            &broker.endpoint(),
            &warmup,
            &format!("w{tag}{}", broker.kind),
        );
        if let Some(failure) = outcome.failure {
            println!("   warm-up on {}: {failure}", broker.kind);
        }
        std::thread::sleep(BETWEEN_RUNS);
    }
    for run in 1..=plan.runs_per_broker {
        for broker in brokers {
            let named = (broker, broker.kind.name());
            let (rate, cpu) = measure_throughput(tag, load, run, named, ticks_per_s);
            rate_row.push(broker.kind, rate);
            cpu_row.push(broker.kind, cpu);
            std::thread::sleep(BETWEEN_RUNS);
        }
    }
    (rate_row, cpu_row)
}

/// A figure's unrecorded warm-up run: a tenth of its messages.
fn warmup_load(load: &Throughput) -> Throughput {
    Throughput {
        messages_per_publisher: (load.messages_per_publisher / WARMUP_DIVISOR).max(1000),
        ..load.clone()
    }
}

/// One run: the delivery rate, and the broker's CPU time per delivery.
/// `name` tells the broker's runs apart in client ids and printed lines.
pub(crate) fn measure_throughput(
    tag: &str,
    load: &Throughput,
    run: usize,
    (broker, name): (&Broker, &str),
    ticks_per_s: u64,
) -> (Sample, Sample) {
    let cpu_before = broker.cpu_time(ticks_per_s);
    let outcome = load::run_throughput(&broker.endpoint(), load, &format!("f{tag}r{run}{name}"));
    let cpu_after = broker.cpu_time(ticks_per_s);
    let prefix = format!("   run {run} {name:<9}");
    if let Some(failure) = outcome.failure {
        println!(
            "{prefix} FAILED: {failure} ({} of {} delivered)",
            outcome.delivered, outcome.expected
        );
        return (Sample::Failed(failure.clone()), Sample::Failed(failure));
    }
    let rate = outcome.delivered_per_s();
    let cpu_us = match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => {
            Sample::Value((after - before).as_secs_f64() * 1e6 / outcome.delivered as f64)
        }
        _ => Sample::Failed("cannot read the broker's CPU time".into()),
    };
    println!(
        "{prefix} {:>14} msg/s  ({} deliveries in {:.2} s, {} duplicates, broker CPU {})",
        report::with_thousands(rate),
        outcome.delivered,
        outcome.elapsed.as_secs_f64(),
        outcome.duplicates,
        match &cpu_us {
            Sample::Value(us) => format!("{us:.2} µs/msg"),
            Sample::Failed(reason) => reason.clone(),
        }
    );
    (Sample::Value(rate), cpu_us)
}

/// Alternating latency runs; returns the p50 and p99 rows, titled from
/// `name` and told apart from other figures' runs by `tag`.
fn run_latency_figure(
    name: &str,
    tag: &str,
    load: &Latency,
    plan: &Plan,
    brokers: &[Broker],
) -> Vec<Row> {
    let title = format!(
        "{name} QoS 1, 1 → 1 at {} msg/s",
        report::with_thousands(f64::from(load.rate_per_s))
    );
    let p50 = Row::new(format!("{title}: p50"), Unit::Microseconds, Better::Lower);
    let p99 = Row::new(format!("{title}: p99"), Unit::Microseconds, Better::Lower);
    println!("\n== {title}, {:?} per run", load.duration);
    let mut rows = [p50, p99];
    alternate_runs(plan, brokers, &mut rows, |broker, run| {
        let label = format!("f{tag}r{run}{}", broker.kind);
        let outcome = load::run_latency(&broker.endpoint(), load, &label);
        match outcome.failure {
            Some(failure) => Err(failure),
            None => Ok((
                [outcome.p50_us, outcome.p99_us],
                format!(
                    "p50 {:.0} µs, p99 {:.0} µs over {} samples",
                    outcome.p50_us, outcome.p99_us, outcome.samples
                ),
            )),
        }
    });
    rows.into()
}

/// Binary sizes (building the cross binaries when it can), memory, then
/// start-up time.
fn run_footprint(plan: &Plan, quick: bool, binaries: &BrokerBinaries, results: &mut Results) {
    println!("\n== footprint");
    let target_dir = cargo_target_dir(&binaries.saguin);
    let cross_build = footprint::build_cross_binaries(&target_dir, !quick);
    results.binary_sizes = footprint::binary_sizes(&target_dir, binaries, &cross_build);
    for size in &results.binary_sizes {
        match &size.size_bytes {
            Ok(bytes) => println!("   {}: {}", size.label, report::format_bytes(*bytes as f64)),
            Err(reason) => println!("   {}: {reason}", size.label),
        }
    }
    match footprint::memory_figure_blocker() {
        Some(blocker) => {
            println!("   memory: {blocker}");
            results.memory_note = Some(blocker);
        }
        None => results.memory = measure_memory_rows(plan, binaries),
    }
    results.startup = Some(startup::measure(&binaries.saguin, plan.startup_records));
}

/// `target/` from `target/release/saguin`.
fn cargo_target_dir(saguin: &Path) -> PathBuf {
    saguin
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

/// Alternating runs, each on a fresh broker.
fn measure_memory_rows(plan: &Plan, binaries: &BrokerBinaries) -> Vec<Row> {
    let mut idle = Row::new(
        "resident memory, idle after start",
        Unit::Bytes,
        Better::Lower,
    );
    let mut connected = Row::new(
        format!("resident memory with {IDLE_CLIENTS} idle clients"),
        Unit::Bytes,
        Better::Lower,
    );
    let mut per_connection = Row::new(
        format!("per connection: (with {IDLE_CLIENTS} − idle) / {IDLE_CLIENTS}"),
        Unit::Bytes,
        Better::Lower,
    );
    for run in 1..=plan.runs_per_broker {
        for kind in BrokerKind::BOTH {
            let prefix = format!("   memory run {run} {kind:<9}");
            match footprint::measure_memory(kind, binaries, None, &format!("m{run}{kind}")) {
                Ok(sample) => {
                    print_memory_sample(&prefix, &sample);
                    idle.push(kind, Sample::Value(sample.idle_bytes as f64));
                    connected.push(kind, Sample::Value(sample.connected_bytes as f64));
                    per_connection.push(kind, Sample::Value(sample.per_connection_bytes()));
                }
                Err(failure) => {
                    println!("{prefix} FAILED: {failure}");
                    for row in [&mut idle, &mut connected, &mut per_connection] {
                        row.push(kind, Sample::Failed(failure.clone()));
                    }
                }
            }
        }
    }
    vec![idle, connected, per_connection]
}

fn print_memory_sample(prefix: &str, sample: &MemorySample) {
    println!(
        "{prefix} idle {}, with {IDLE_CLIENTS} clients {}, {:.0} B per connection",
        report::format_bytes(sample.idle_bytes as f64),
        report::format_bytes(sample.connected_bytes as f64),
        sample.per_connection_bytes()
    );
}

/// The whole report as Markdown: what is printed, and what --write saves.
fn render_document(
    options: &Options,
    plan: &Plan,
    binaries: &BrokerBinaries,
    run: &RunContext,
    results: &Results,
) -> String {
    let machine = machine::describe(&binaries.mosquitto);
    let command = std::iter::once("target/release/saguin-bench".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let mut doc = String::new();
    doc.push_str(&format!(
        "# Benchmarks\n\n\
         Generated by `saguin-bench` (bench/): do not edit by hand, run it again:\n\n\
         ```\ncargo build --release --workspace\n{command}\n```\n\n\
         ## Machine and run\n\n\
         - Date: {}\n\
         - CPUs: {} (nproc), {}\n\
         - Kernel: {}\n\
         - saguin {}; mosquitto {} (Debian package)\n\
         - Mode: {}, {} runs per figure per broker, alternating {}; \
         each figure is the median of its runs\n\
         - 1-minute load average before the runs: {}, after: {} (anything else running on the \
         machine adds noise to both brokers' figures)\n",
        run.started_at,
        machine.cpus,
        machine.cpu_model,
        machine.kernel,
        machine.saguin_revision,
        machine.mosquitto_version,
        if options.quick {
            "--quick (smoke test)"
        } else {
            "full"
        },
        plan.runs_per_broker,
        match &binaries.baseline {
            Some(_) => "saguin, its baseline, mosquitto, saguin, … (figures 1 to 7)",
            None => "saguin, mosquitto, saguin, …",
        },
        run.load_before,
        run.load_after,
    ));
    if options.figures.contains(&Figure::Durable) {
        let root = brokers::temp_root();
        doc.push_str(&format!(
            "- Figure 6's redb files: under {}, {}\n",
            root.display(),
            machine::file_system_of(&root).unwrap_or_else(|| "file system unknown".into())
        ));
    }
    if let Some(baseline) = &binaries.baseline {
        doc.push_str(&format!(
            "- Baseline: {} ({}), run beside saguin in figures 1 to 7 with the same \
             configuration; the saguin / baseline column is the new binary's median over the \
             baseline's\n",
            baseline.display(),
            machine::revision_of(baseline)
        ));
    }
    doc.push_str("\n## Throughput and latency\n\n");
    doc.push_str(&report::results_table(&results.figures));
    doc.push('\n');
    doc.push_str(&method_notes(plan));
    if !results.broker_cpu.is_empty() {
        doc.push_str(
            "\n## Broker CPU time per delivered message\n\n\
             User plus system time of the broker process over each run (from /proc/PID/stat), \
             divided by the messages delivered: the broker's own cost, apart from the load \
             generator it shares the cores with.\n\n",
        );
        doc.push_str(&report::results_table(&results.broker_cpu));
    }
    if !results.acl.is_empty() {
        doc.push_str(&acl_section(&results.acl));
    }
    doc.push_str(&footprint_section(results, options.quick));
    doc.push_str("\n## Every run\n\n");
    doc.push_str(&report::runs_table(&results.figures));
    // The CPU rows repeat the failures of the figures they come from.
    let startup_rows: Vec<Row> = results
        .startup
        .iter()
        .flat_map(|figure| figure.rows().map(Row::clone))
        .collect();
    let failures: Vec<String> = [&results.figures, &results.memory, &startup_rows]
        .into_iter()
        .flat_map(|rows| report::failure_lines(rows))
        .collect();
    if !failures.is_empty() {
        doc.push_str("\n## Failed runs\n\n");
        for line in failures {
            doc.push_str(&format!("- {line}\n"));
        }
    }
    doc.push_str(&configuration_section());
    doc
}

fn method_notes(plan: &Plan) -> String {
    format!(
        "How the figures are taken:\n\n\
         - Both brokers listen on 127.0.0.1 and are started once for figures 1 to 5, and a fresh \
         pair for figure 6; each figure begins with one unrecorded warm-up run per broker.\n\
         - The load generator is this program: one thread per client connection, MQTT 5 clients \
         with TCP_NODELAY and a Receive Maximum of {QOS1_WINDOW_MESSAGES}, {PAYLOAD_BYTES}-byte \
         payloads carrying a sequence number and the send time. **It runs on the same {cpus} \
         cores as the broker and competes with it for CPU**, the same way for both brokers: the \
         rates are those of broker plus clients on one small machine, not of the broker alone \
         (see the CPU table for that).\n\
         - A rate is the distinct messages received by all subscribers divided by the time from \
         the start (every client connected and subscribed) to the last message received.\n\
         - Every subscriber must see every sequence number at least once; a run with any message \
         missing is FAILED, and a figure with any failed run shows FAILED instead of a rate.\n\
         - Flow control, the same for both brokers: all publishers together stay at most \
         {END_TO_END_WINDOW_MESSAGES} messages ahead of the slowest subscriber (subscribers \
         report progress), so no broker queue fills and neither broker has cause to drop. A \
         broker acknowledges a QoS 1 publish on arrival, so without this a fan-in publisher \
         would outrun the subscriber until the broker's queue bound dropped messages.\n\
         - mosquitto's max_queued_messages is 1,000,000, not 100,000: mosquitto 2.0.11 \
         over-counts its queue, and at 100,000 it logged \"Outgoing messages are being dropped\" \
         and lost about 1,000 messages in every fan-in run, with never more than 1,000 \
         outstanding. No run comes near either broker's bound.\n\
         - QoS 0: {qos0} messages a run.\n\
         - QoS 1: each publisher also keeps at most {QOS1_WINDOW_MESSAGES} publishes \
         unacknowledged; subscribers acknowledge every delivery. Figure 2: {qos1} messages; \
         figure 3: {fan_out} publishes to {FAN_CLIENTS} subscribers; figure 4: {FAN_CLIENTS} \
         publishers × {fan_in} messages.\n\
         - Latency: one QoS 1 publisher paced at {LATENCY_RATE_PER_S} msg/s for {latency:?}; a \
         message's latency is its arrival time at the subscriber minus the send time in its \
         payload (one process clock); the first 5% of each run is not sampled.\n\
         - Durable append (figure 6): saguin runs with a redb provider, a fresh file in its \
         temporary directory, and an append channel claiming `{DURABLE_FILTER}`, so a QoS 1 \
         PUBACK leaves only once the record is committed and fsynced. `publish_commit_interval` \
         is absent, which is group commit: a publish finding no commit running is committed at \
         once, and whatever queues while a commit runs forms the next one. Publishers send to \
         `durable/<run>`; the subscriber subscribes to `{DURABLE_FILTER}` at QoS 1 with a clean \
         session and receives each record with its saguin-id, saguin-offset and \
         saguin-timestamp User Properties. The channel has `start: tail`, so a run's subscriber \
         gets what is published after it subscribed and never the records of the runs before \
         it, which stay in the file. mosquitto gets the same load on its plain QoS 1 without \
         persistence, as in figure 2: the comparison the project set, durable append on redb \
         against mosquitto's non-durable QoS 1, with a target of at least half of mosquitto's \
         rate (a ratio of 0.50). 6a: 1 publisher × {durable} messages; 6b: {DURABLE_PUBLISHERS} \
         publishers × {durable_each} messages, each publisher keeping at most \
         {QOS1_WINDOW_MESSAGES} unacknowledged, all within the end-to-end window above. The \
         line with a commit per publish is 6a on another saguin whose provider has \
         `publish_commit_interval: none`, one transaction and one fsync per publish, \
         {per_publish} messages a run (its rate is the disk's fsync rate).\n\
         - Queue (figure 7, saguin alone: mosquitto has no queue): the redb provider of figure \
         6 with a queue `work` claiming `work/#`. A producer fills a backlog first; the workers \
         then subscribe to `$saguin/queue/work` and answer each job as a Paho handler does, \
         `ack` on the response topic and the PUBACK in one write. A run is timed from the first \
         SUBSCRIBE to the last answer's PUBACK, and fails if any job reaches two workers or any \
         is missing. 7a: 300 jobs, one worker; 7b and 7c: {queue_jobs} jobs, 1 and 4 workers.\n\
         - Wrong passwords (figure 8): a fresh pair of brokers reading one password file that \
         `saguin --passwd` wrote (one user, `$7$` with 101 iterations, the default of both), \
         still admitting clients without a user name. {storm} CONNECTs naming that user with a \
         wrong password come from {storm_threads} threads, each sending one after another; a run \
         is timed from the first to the last refusal. Meanwhile an anonymous bystander connected \
         before the storm publishes at QoS 1 every 2 ms, one at a time, and its PUBACK round \
         trips give the p99. saguin checks each password on a thread of its own, one at a time, \
         so the executor serving the bystander computes no hash; mosquitto checks on its one \
         thread. The argon2id rows (saguin alone: Debian's mosquitto 2.0 reads \
         no argon2id) are the same storm of {argon2id_storm} CONNECTs against a password file whose one \
         user `saguin --passwd add --argon2id` wrote at mosquitto 2.1's costs (m=47104 KiB, t=1, p=1), \
         standing in for a file mosquitto 2.1 wrote; the hash itself is checked against RFC 9106's \
         test vector and libargon2's output in the unit tests.\n\
         - Bridge (figure 11, saguin alone): saguin on the redb provider of figure 6 bridges \
         `durable/#` out to a mosquitto peer (default `receive_maximum` 20). The peer is paused \
         with SIGSTOP while {bridge_records} records are published to saguin on one topic and \
         stored, then resumed; a run is timed from the resume to the last record reaching a \
         subscriber at the peer. One topic, so each record waits for the one before it to be \
         acknowledged (per-topic order).\n\
         - TLS (figure 13): both brokers serve one certificate, made for the run with \
         `openssl` (an ECDSA P-256 authority and a server certificate it signs for \
         127.0.0.1), on their one door; the load generator's clients use rustls with the ring \
         provider, trust that authority alone, and keep TCP_NODELAY as in the plain figures. \
         13a is figure 2's load; 13b is figure 5's, except that the publisher reads its PUBACKs \
         on its sending thread between sends (one TLS session cannot be shared by two \
         threads), which leaves each message's latency, counted from the stamp taken as it is \
         queued, as it was. 13c: {handshakes} connections a run from {handshake_threads} \
         threads, each one after another: TCP connect, a full TLS handshake (the client keeps \
         no session to resume), an MQTT 3.1.1 CONNECT answered by its CONNACK, DISCONNECT; \
         the rate runs from the first connect to the last CONNACK.\n\
         - Operations listener (figure 14, saguin alone): 14a and 14b are figure 2's load on a \
         fresh saguin each run, alternating: 12a without `broker.operations`, 12b with a loopback \
         door whose `/metrics` is asked for once a second through the run (recomputed at most once \
         a `min_scrape_interval`, 60 s, and answered from the last scrape between). 14c is the \
         first scrape of a fresh saguin, the one it computes, timed from the request to the last \
         byte, with {scrape_clients} idle MQTT 5 clients connected and {scrape_channels} append \
         channels on a memory provider.\n\
         - Other doors (figure 15): a fresh pair of brokers for each door, each with that door \
         alone (mosquitto beside it the TCP listener 2.0.11 needs before it opens a WebSocket \
         one). 15a is figure 2's load over WebSocket (saguin's `ws` door, same_origin off; \
         mosquitto's `protocol websockets` listener with `socket_domain ipv4`): the load \
         generator asks for the upgrade and frames every write as one binary frame masked as a \
         client's must be, with saguin's own frame code, and reads what comes back in place. 15b \
         is the same load over a Unix socket (saguin's `unix` door; mosquitto's `listener 0 \
         <path>`). 15c and 15d: resident memory of a fresh broker idle and with {idle} idle \
         clients connected over WebSocket (15c) and over TCP (15d), in the same runs, as the \
         footprint's memory figure takes it.\n\
         {stock}\
         {scale}",
        handshakes = report::with_thousands(plan.handshakes as f64),
        handshake_threads = handshakes::THREADS,
        stock = stock::method_notes(&stock::StockPlan::new(plan.runs_per_broker, plan.quick)),
        scale = scale::method_notes(&plan.scale),
        scrape_clients = report::with_thousands(scrape::SCRAPE_CLIENTS as f64),
        scrape_channels = scrape::SCRAPE_CHANNELS,
        idle = report::with_thousands(IDLE_CLIENTS as f64),
        storm = report::with_thousands(auth_storm::STORM_CONNECTS as f64),
        storm_threads = auth_storm::STORM_THREADS,
        argon2id_storm = report::with_thousands(auth_storm::ARGON2ID_STORM_CONNECTS as f64),
        cpus = std::thread::available_parallelism().map_or(0, |n| n.get()),
        qos0 = report::with_thousands(plan.qos0_messages as f64),
        qos1 = report::with_thousands(plan.qos1_messages as f64),
        fan_out = report::with_thousands(plan.fan_out_publishes as f64),
        fan_in = report::with_thousands(plan.fan_in_messages_per_publisher as f64),
        latency = plan.latency_duration,
        durable = report::with_thousands(plan.durable_messages as f64),
        durable_each = report::with_thousands(plan.durable_messages_per_publisher as f64),
        per_publish = report::with_thousands(plan.durable_per_publish_messages as f64),
        queue_jobs = report::with_thousands(plan.queue_rate_jobs as f64),
        bridge_records = report::with_thousands(plan.bridge_backlog_records as f64),
    )
}

fn acl_section(rows: &[PairRow]) -> String {
    let ratio = rows
        .first()
        .and_then(PairRow::ratio)
        .map_or("no ratio (a run failed)".to_string(), |r| format!("{r:.2}"));
    format!(
        "\n## What an acl_file costs (figure 12)\n\n\
         saguin alone, two brokers of one binary: both check every CONNECT against one \
         password file of {users} users, and one of them also holds an acl_file of {users} \
         entries, one role each, {rules} rules in all (five `topic:` rules a role: four over \
         the user's own `fleet/NNNN/...` topics, one through `%c`, and `bench/#`). The load \
         is figure 2's, its clients logged in as one of the users; runs alternate between the \
         two brokers after a warm-up each. The rate with the file over the rate without it: \
         **{ratio}** (the aim is 0.90 or more).\n\n{}",
        report::pair_table(rows, "with the acl_file", "without"),
        users = report::with_thousands(acl_figure::USERS as f64),
        rules = report::with_thousands((acl_figure::USERS * acl_figure::RULES_PER_ROLE) as f64),
    )
}

fn footprint_section(results: &Results, quick: bool) -> String {
    let mut text = String::new();
    if results.binary_sizes.is_empty()
        && results.memory.is_empty()
        && results.memory_note.is_none()
        && results.startup.is_none()
    {
        return text;
    }
    text.push_str("\n## Footprint\n\n| Binary | Size |\n| --- | ---: |\n");
    for size in &results.binary_sizes {
        let cell = match &size.size_bytes {
            Ok(bytes) => report::format_bytes(*bytes as f64),
            Err(reason) => reason.clone(),
        };
        text.push_str(&format!("| {} | {cell} |\n", size.label));
    }
    text.push_str(&format!(
        "\nResident memory (VmRSS) of a freshly started broker, idle and then with {IDLE_CLIENTS} \
         idle MQTT 3.1.1 clients (keepalive 600 s, one TCP connection each, held by the bench); \
         a fresh broker per run, runs alternating. RSS counts the pages a process has touched, so \
         memory allocated at start but touched only as clients arrive (saguin's connection table \
         sized for max_connections) shows up per connection.\n\n"
    ));
    match &results.memory_note {
        Some(note) => text.push_str(&format!("Memory figure {note}\n")),
        None => text.push_str(&report::results_table(&results.memory)),
    }
    if let Some(figure) = &results.startup {
        text.push_str(&startup_section(figure, quick));
    }
    text
}

fn startup_section(figure: &StartupFigure, quick: bool) -> String {
    let saguin = BrokerKind::Saguin;
    let records = report::with_thousands(figure.records as f64);
    let built = figure.build_time.map_or(String::new(), |time| {
        format!(" (writing them took {:.1} s)", time.as_secs_f64())
    });
    let mut text = format!(
        "\nStart-up time: from spawning saguin to its `listener tcp bound to` log line, which it \
         writes after opening storage (saguin has redb verify the checksum of every page of the \
         file and rebuild its allocator state at each open, then commit) and reading every \
         channel's counters; a fresh process each start, stopped with SIGTERM before the \
         next; {starts} starts on each file, alternating, and the median. The file: a redb \
         provider holding {records} records in one append channel `{channel}` claiming \
         `{filter}`, each a {payload}-byte payload on `{topic}`, written through the library \
         (`RedbProvider`, {commit} appends a commit) once per bench run{built}, so it is in the \
         page cache when the broker starts; every start must log `channel {channel} on local: \
         floor 1, next {next}`, or it fails. The empty provider is a file the library created \
         and closed with nothing in it, started with the same configuration. mosquitto has no \
         equivalent: its persistence is off in this bench.\n\n\
         | Figure | saguin (median) | mosquitto (median) | saguin / mosquitto |\n\
         | --- | ---: | ---: | ---: |\n",
        starts = startup::STARTS,
        channel = startup::CHANNEL,
        filter = startup::FILTER,
        payload = startup::PAYLOAD_BYTES,
        topic = startup::TOPIC,
        commit = report::with_thousands(startup::COMMIT_RECORDS as f64),
        next = figure.records + 1,
    );
    let quick_note = if quick {
        " (--quick: the full run uses 1,000,000)"
    } else {
        ""
    };
    text.push_str(&format!(
        "| {}{quick_note} | {} (empty provider: {}) | — | — |\n",
        figure.loaded.label,
        figure.loaded.median_cell(saguin),
        figure.empty.median_cell(saguin),
    ));
    let size = match figure.file_bytes {
        Ok(bytes) => report::format_bytes(bytes as f64),
        Err(ref reason) => reason.clone(),
    };
    text.push_str(&format!(
        "| the redb file holding the {records} records | {size} | — | — |\n"
    ));
    text.push_str(&format!(
        "\nEvery start: with the records {}; empty provider {}.\n",
        figure.loaded.runs_text(saguin),
        figure.empty.runs_text(saguin),
    ));
    text
}

fn configuration_section() -> String {
    let tls_configs = brokers::tls_config_texts();
    format!(
        "\n## Configurations\n\n\
         saguin (figures 1 to 5, and the memory figure):\n\n```yaml\n{}```\n\n\
         saguin for figure 6: the same, a redb provider and an append channel claiming \
         `{DURABLE_FILTER}`; the line with a commit per publish adds \
         `publish_commit_interval: none` under `local`:\n\n```yaml\n{}```\n\n\
         saguin for the start-up figure: the same as for figures 1 to 5 at `log_level: info`, \
         with the fixture's redb provider and an append channel on it:\n\n```yaml\n{}```\n\n\
         mosquitto (every figure):\n\n```\n{}```\n\n\
         saguin for figure 12 (the broker without the file leaves out `acl_file`):\n\n\
         ```yaml\n{}```\n\n\
         saguin for figure 13:\n\n```yaml\n{}```\n\n\
         mosquitto for figure 13:\n\n```\n{}```\n",
        brokers::saguin_config_text(SaguinSetup::Plain),
        brokers::saguin_config_text(SaguinSetup::GroupCommit),
        startup::config_text(),
        brokers::mosquitto_config_text(),
        brokers::acl_config_text(),
        tls_configs.0,
        tls_configs.1,
    )
}
