//! Figures 9 and 10: clients nobody here wrote, at their defaults, and the
//! bytes a durable record or session costs the storage device.
//!
//! paho-mqtt (Python) runs `bench/paho/paho_load.py`; libmosquitto runs
//! `bench/mosq/mosq_pub.c`, compiled here with the system's C compiler
//! (Debian: libmosquitto-dev). Neither sets TCP_NODELAY, and libmosquitto
//! keeps its default of 20 QoS 1 messages in flight.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::brokers::{Broker, BrokerBinaries, BrokerKind, MosquittoSetup, SaguinSetup, TempDir};
use crate::report::{Better, Row, Sample, Unit};

/// QoS 1 publishes libmosquitto's application side queues ahead of their
/// PUBACKs: more than the library's 20 in flight, so its window is full.
const AHEAD_OF_WINDOW: u64 = 1000;
/// The in-flight count the flash-wear figure is taken at.
pub const WEAR_IN_FLIGHT: u64 = 16;

/// The bench crate's own directory, where the client programs are.
fn bench_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `program args`, failing with its stderr, and returns its stdout.
fn run(program: &Path, args: &[String]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("run {}: {e}", program.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} {}: {}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The value of the `name value` line `name` in a client's output.
fn figure(output: &str, name: &str) -> Result<f64, String> {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .ok_or_else(|| format!("no `{name}` in the client's output: {output:?}"))
}

/// Compiles `bench/mosq/NAME.c` against libmosquitto into `dir`; fails,
/// naming the package, if the compiler or the library's headers are
/// missing.
fn compile(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let program = dir.join(name);
    let source = bench_dir().join(format!("mosq/{name}.c"));
    let compiled = Command::new("cc")
        .arg("-O2")
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .args(["-lmosquitto", "-lpthread"])
        .output()
        .map_err(|e| format!("run cc: {e} (apt-get install gcc libmosquitto-dev)"))?;
    if !compiled.status.success() {
        return Err(format!(
            "cannot compile {} (apt-get install libmosquitto-dev): {}",
            source.display(),
            String::from_utf8_lossy(&compiled.stderr).trim()
        ));
    }
    Ok(program)
}

/// What the live consumer of figure 16d saw.
#[derive(Clone, Copy, Debug)]
pub struct Consumed {
    /// Messages delivered per second, from the first message's send stamp
    /// to the last arrival.
    pub per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Consumed {
    /// From `mosq_sub`'s output, which must account for `count` messages.
    fn from_output(output: &str, count: u64) -> Result<Consumed, String> {
        let received = figure(output, "received")?;
        if received < count as f64 {
            return Err(format!(
                "the subscriber took {received} of {count} messages"
            ));
        }
        let span_us = figure(output, "span_us")?;
        Ok(Consumed {
            per_s: received / (span_us.max(1.0) / 1e6),
            p50_us: figure(output, "p50_us")?,
            p99_us: figure(output, "p99_us")?,
        })
    }
}

/// The stock clients, ready to run.
pub struct StockClients {
    python: PathBuf,
    mosq_pub: PathBuf,
    mosq_sub: PathBuf,
    /// Holds the compiled programs.
    _dir: TempDir,
}

impl StockClients {
    /// Compiles the libmosquitto publisher; fails, naming the package, if
    /// the compiler or the library's headers are missing.
    pub fn prepare() -> Result<StockClients, String> {
        let dir = TempDir::new("stock-clients")?;
        Ok(StockClients {
            python: PathBuf::from("python3"),
            mosq_pub: compile(dir.path(), "mosq_pub")?,
            mosq_sub: compile(dir.path(), "mosq_sub")?,
            _dir: dir,
        })
    }

    /// A libmosquitto subscriber at its defaults on `topic` while one
    /// libmosquitto publisher sends it `count` 64-byte QoS 1 messages, at
    /// most `ahead` unacknowledged (figure 16d).
    pub fn live_consumer(
        &self,
        broker: &Broker,
        topic: &str,
        count: u64,
        ahead: u64,
    ) -> Result<Consumed, String> {
        use std::io::{BufRead, BufReader, Read};
        let port = broker.address.port().to_string();
        let mut subscriber = Command::new(&self.mosq_sub)
            .args([&port, topic, &count.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("run {}: {e}", self.mosq_sub.display()))?;
        let mut output = BufReader::new(subscriber.stdout.take().expect("piped"));
        // The subscriber gives up by itself when its SUBACK or its
        // messages stop coming, so these reads end.
        let mut first = String::new();
        let _ = output.read_line(&mut first);
        let published = if first.trim() == "subscribed" {
            let args = [
                port,
                topic.to_string(),
                count.to_string(),
                ahead.to_string(),
            ];
            run(&self.mosq_pub, &args).map(drop)
        } else {
            Ok(())
        };
        let mut rest = String::new();
        let _ = output.read_to_string(&mut rest);
        let mut errors = String::new();
        if let Some(mut stderr) = subscriber.stderr.take() {
            let _ = stderr.read_to_string(&mut errors);
        }
        let status = subscriber
            .wait()
            .map_err(|e| format!("wait for {}: {e}", self.mosq_sub.display()))?;
        published?;
        if !status.success() || first.trim() != "subscribed" {
            return Err(format!(
                "{} {topic}: {}",
                self.mosq_sub.display(),
                errors.trim()
            ));
        }
        Consumed::from_output(&rest, count)
    }

    fn paho(&self, broker: &Broker, figure_args: &[&str]) -> Result<String, String> {
        let mut args = vec![
            bench_dir().join("paho/paho_load.py").display().to_string(),
            "--port".to_string(),
            broker.address.port().to_string(),
        ];
        args.extend(figure_args.iter().map(|a| a.to_string()));
        run(&self.python, &args)
    }

    /// Milliseconds a default paho worker takes to drain `jobs` jobs.
    pub fn paho_queue_drain_ms(&self, broker: &Broker, jobs: u64) -> Result<f64, String> {
        let output = self.paho(broker, &["queue-drain", "--jobs", &jobs.to_string()])?;
        figure(&output, "drain_ms")
    }

    /// Milliseconds `round_trips` paho request/response round trips take.
    pub fn paho_request_response_ms(
        &self,
        broker: &Broker,
        round_trips: u64,
    ) -> Result<f64, String> {
        let round_trips = round_trips.to_string();
        let output = self.paho(broker, &["request-response", "--round-trips", &round_trips])?;
        figure(&output, "total_ms")
    }

    /// One libmosquitto publisher sending `count` 64-byte QoS 1 publishes
    /// to `topic`, at most `ahead` unacknowledged: how long it took, and
    /// the bytes the broker wrote to the device meanwhile.
    pub fn mosquitto_publish(
        &self,
        broker: &Broker,
        topic: &str,
        count: u64,
        ahead: Option<u64>,
    ) -> Result<Published, String> {
        let before = broker.device_write_bytes()?;
        let args = [
            broker.address.port().to_string(),
            topic.to_string(),
            count.to_string(),
            ahead.unwrap_or(AHEAD_OF_WINDOW).to_string(),
        ];
        let output = run(&self.mosq_pub, &args)?;
        let elapsed_us = figure(&output, "elapsed_us")?;
        let written = broker.device_write_bytes()? - before;
        Ok(Published {
            per_s: count as f64 / (elapsed_us / 1e6),
            us_each: elapsed_us / count as f64,
            bytes_each: written as f64 / count as f64,
        })
    }

    /// Bytes the broker writes to the device per reconnect of a durable
    /// session: `mosquitto_sub -c` connects with a persistent session,
    /// subscribes at QoS 1 and disconnects, `cycles` times for each of a
    /// few client ids (the first cycle of each, which creates the session,
    /// is not counted).
    pub fn session_reconnect_bytes(
        &self,
        broker: &Broker,
        tag: &str,
        cycles: u64,
    ) -> Result<f64, String> {
        const SESSIONS: u64 = 4;
        let cycle = |id: u64| -> Result<(), String> {
            let args = [
                "-h",
                "127.0.0.1",
                "-p",
                &broker.address.port().to_string(),
                "-i",
                &format!("{tag}-session-{id}"),
                "-c",
                "-q",
                "1",
                "-t",
                &format!("sessions/{tag}/{id}"),
                "-E",
            ]
            .map(String::from);
            run(Path::new("mosquitto_sub"), &args).map(drop)
        };
        for id in 0..SESSIONS {
            cycle(id)?;
        }
        let before = broker.device_write_bytes()?;
        for round in 0..cycles {
            cycle(round % SESSIONS)?;
        }
        let written = broker.device_write_bytes()? - before;
        Ok(written as f64 / cycles as f64)
    }
}

/// What one libmosquitto publishing run measured.
#[derive(Clone, Copy, Debug)]
pub struct Published {
    pub per_s: f64,
    pub us_each: f64,
    pub bytes_each: f64,
}

/// How much each run of figures 9 and 10 does.
pub struct StockPlan {
    pub runs: usize,
    pub drain_jobs: u64,
    pub round_trips: u64,
    pub window_messages: u64,
    pub one_at_a_time_messages: u64,
    pub wear_window_messages: u64,
    pub session_cycles: u64,
}

impl StockPlan {
    pub fn new(runs: usize, quick: bool) -> StockPlan {
        let scale = if quick { 4 } else { 1 };
        StockPlan {
            runs,
            drain_jobs: 300,
            round_trips: 200,
            window_messages: 20_000 / scale,
            one_at_a_time_messages: 1_000 / scale,
            wear_window_messages: 8_000 / scale,
            session_cycles: 40 / scale,
        }
    }
}

pub const DRAIN_LABEL: &str = "9a. paho-mqtt queue worker at its defaults drains a 300-job backlog";
pub const REQUEST_RESPONSE_LABEL: &str =
    "9b. paho-mqtt request/response at its defaults, broadcast QoS 1, 200 round trips";
pub const WINDOW_LABEL: &str = "9c. libmosquitto publisher at its defaults (20 in flight), 64 B QoS 1 (saguin: durable append; mosquitto: not durable)";
pub const ONE_AT_A_TIME_LABEL: &str = "9d. libmosquitto publisher waiting for each PUBACK: time per acknowledged publish (saguin: durable append; mosquitto: not durable)";
pub const WEAR_ONE_LABEL: &str = "10a. bytes written to the device per acknowledged 64 B record, one at a time (saguin: redb; mosquitto: persistence true)";
pub const WEAR_WINDOW_LABEL: &str = "10b. bytes written to the device per acknowledged 64 B record, 16 in flight (saguin: redb; mosquitto: persistence true)";
pub const WEAR_SESSION_LABEL: &str = "10c. bytes written to the device per durable session reconnect: CONNECT, SUBSCRIBE, DISCONNECT (saguin: redb; mosquitto: persistence true)";
pub const BOARD_WEAR_LABEL: &str = "10d. as 10b, with the Raspberry Pi 4 profile's publish_commit_interval (20ms, 16 records), saguin only";
pub const BOARD_LATENCY_LABEL: &str = "10e. as 9d, with the Raspberry Pi 4 profile's publish_commit_interval: what the wait costs a lone publisher, saguin only";

fn sample(result: Result<f64, String>) -> Sample {
    match result {
        Ok(value) => Sample::Value(value),
        Err(failure) => Sample::Failed(failure),
    }
}

fn start(
    kind: BrokerKind,
    binaries: &BrokerBinaries,
    setup: SaguinSetup,
    mosquitto: MosquittoSetup,
) -> Result<Broker, String> {
    let broker = Broker::start_as(kind, binaries, setup, mosquitto)?;
    println!(
        "{kind} ({}) listening on {} (pid {})",
        match kind {
            BrokerKind::Saguin | BrokerKind::Baseline => format!("{setup:?}"),
            BrokerKind::Mosquitto => format!("{mosquitto:?}"),
        },
        broker.address,
        broker.pid()
    );
    Ok(broker)
}

/// Figures 9 and 10; their rows, in order.
pub fn run_figures(plan: &StockPlan, binaries: &BrokerBinaries) -> Result<Vec<Row>, String> {
    let clients = StockClients::prepare()?;
    let mut drain = Row::new(DRAIN_LABEL, Unit::Milliseconds, Better::Lower);
    let mut request_response = Row::new(REQUEST_RESPONSE_LABEL, Unit::Milliseconds, Better::Lower);
    let mut window = Row::new(WINDOW_LABEL, Unit::MessagesPerS, Better::Higher);
    let mut one = Row::new(ONE_AT_A_TIME_LABEL, Unit::Microseconds, Better::Lower);
    let mut wear_one = Row::new(WEAR_ONE_LABEL, Unit::Bytes, Better::Lower);
    let mut wear_window = Row::new(WEAR_WINDOW_LABEL, Unit::Bytes, Better::Lower);
    let mut wear_session = Row::new(WEAR_SESSION_LABEL, Unit::Bytes, Better::Lower);
    let mut board_wear = Row::new(BOARD_WEAR_LABEL, Unit::Bytes, Better::Lower);
    let mut board_latency = Row::new(BOARD_LATENCY_LABEL, Unit::Microseconds, Better::Lower);

    println!("\n== 9. stock clients at their defaults");
    let brokers = [
        start(
            BrokerKind::Saguin,
            binaries,
            SaguinSetup::Stock,
            MosquittoSetup::Stock,
        )?,
        start(
            BrokerKind::Mosquitto,
            binaries,
            SaguinSetup::Stock,
            MosquittoSetup::Stock,
        )?,
    ];
    for run in 0..=plan.runs {
        // Run 0 warms both brokers up and is not recorded.
        let keep = |row: &mut Row, kind, result: Result<f64, String>| {
            println!("   run {run} {kind:<9} {}: {result:?}", row.label);
            if run > 0 {
                row.push(kind, sample(result));
            }
        };
        for broker in &brokers {
            let kind = broker.kind;
            if kind == BrokerKind::Saguin {
                let drained = clients.paho_queue_drain_ms(broker, plan.drain_jobs);
                keep(&mut drain, kind, drained);
            }
            let rr = clients.paho_request_response_ms(broker, plan.round_trips);
            keep(&mut request_response, kind, rr);
            let topic = format!("durable/stock/{run}");
            let published = clients.mosquitto_publish(broker, &topic, plan.window_messages, None);
            keep(&mut window, kind, published.map(|p| p.per_s));
            let published =
                clients.mosquitto_publish(broker, &topic, plan.one_at_a_time_messages, Some(1));
            keep(&mut one, kind, published.map(|p| p.us_each));
        }
    }
    for broker in brokers {
        broker.stop();
    }

    println!("\n== 10. bytes written to the storage device");
    let brokers = [
        start(
            BrokerKind::Saguin,
            binaries,
            SaguinSetup::Stock,
            MosquittoSetup::Stock,
        )?,
        start(
            BrokerKind::Mosquitto,
            binaries,
            SaguinSetup::Stock,
            MosquittoSetup::Persistent,
        )?,
        start(
            BrokerKind::Saguin,
            binaries,
            SaguinSetup::Pi4Commit,
            MosquittoSetup::Stock,
        )?,
    ];
    for run in 0..=plan.runs {
        let keep = |row: &mut Row, kind, result: Result<f64, String>| {
            println!("   run {run} {kind:<9} {}: {result:?}", row.label);
            if run > 0 {
                row.push(kind, sample(result));
            }
        };
        let topic = format!("durable/wear/{run}");
        let [saguin, mosquitto, board] = &brokers;
        for broker in [saguin, mosquitto] {
            let kind = broker.kind;
            let published =
                clients.mosquitto_publish(broker, &topic, plan.one_at_a_time_messages, Some(1));
            keep(&mut wear_one, kind, published.map(|p| p.bytes_each));
            let published = clients.mosquitto_publish(
                broker,
                &topic,
                plan.wear_window_messages,
                Some(WEAR_IN_FLIGHT),
            );
            keep(&mut wear_window, kind, published.map(|p| p.bytes_each));
            let tag = format!("r{run}");
            let session = clients.session_reconnect_bytes(broker, &tag, plan.session_cycles);
            keep(&mut wear_session, kind, session);
        }
        let published = clients.mosquitto_publish(
            board,
            &topic,
            plan.wear_window_messages,
            Some(WEAR_IN_FLIGHT),
        );
        keep(
            &mut board_wear,
            BrokerKind::Saguin,
            published.map(|p| p.bytes_each),
        );
        let published =
            clients.mosquitto_publish(board, &topic, plan.one_at_a_time_messages / 4, Some(1));
        keep(
            &mut board_latency,
            BrokerKind::Saguin,
            published.map(|p| p.us_each),
        );
    }
    for broker in brokers {
        broker.stop();
    }
    drain.saguin_only = true;
    board_wear.saguin_only = true;
    board_latency.saguin_only = true;
    Ok(vec![
        drain,
        request_response,
        window,
        one,
        wear_one,
        wear_window,
        wear_session,
        board_wear,
        board_latency,
    ])
}

/// How figures 9 and 10 are taken, for BENCHMARKS.md.
pub fn method_notes(plan: &StockPlan) -> String {
    let n = |count: u64| crate::report::with_thousands(count as f64);
    format!(
        "- Stock clients (figure 9): clients nobody here wrote, at their defaults, so Nagle's \
         algorithm is on in every one. saguin runs the redb provider of figure 7 with sessions \
         on it too; mosquitto runs with its own default `set_tcp_nodelay false` and no \
         persistence, one fresh pair for the figure, a warm-up run each, then alternating runs. \
         9a: paho-mqtt 2 (Python, `bench/paho/paho_load.py`) publishes a 300-job backlog, then \
         one worker subscribes to `$saguin/queue/work` and answers `ack` from its callback, so \
         paho writes the answer and then the job's PUBACK; timed from SUBSCRIBE to the last \
         answer's PUBACK (mosquitto has no queue). 9b: a paho requester and responder over \
         broadcast QoS 1, each request published from the callback that took the last answer, \
         {round_trips} round trips. 9c: one libmosquitto 2.0 publisher (`bench/mosq/mosq_pub.c`, \
         compiled at run time against libmosquitto-dev) at MQTT 3.1.1 and its default 20 \
         messages in flight, {window} 64-byte QoS 1 publishes to `durable/...`, a durable \
         append channel on saguin and plain QoS 1 on mosquitto; the rate is publishes \
         acknowledged per second. 9d: the same publisher waiting for each PUBACK, {one} \
         publishes.\n\
         - Bytes written (figure 10): `write_bytes` of the broker's /proc/PID/io around a run, \
         which counts each page the process dirtied once until it is written back, so a page \
         rewritten after every fsync counts every time: what the flash sees, less the file \
         system's own journal. saguin as in figure 9 (redb, group commit); mosquitto with \
         `persistence true`, which writes its database only at `autosave_interval` (30 \
         minutes by default) and at shutdown, so its 0 B is a record acknowledged with nothing \
         on the device, not a cheaper durable write. 10a: {one} publishes one at a time; 10b: \
         {wear_window} publishes, {in_flight} in flight; 10c: `mosquitto_sub -c -E` reconnecting \
         4 persistent sessions {cycles} times (CONNECT with a kept session, SUBSCRIBE at QoS 1, \
         DISCONNECT), each session's first connection not counted. 10d and 10e: another saguin \
         whose provider has the Raspberry Pi 4 profile's `publish_commit_interval: 20ms` and \
         `publish_commit_max_records: 16`: 10b's load, and a quarter of 9d's.\n",
        round_trips = n(plan.round_trips),
        window = n(plan.window_messages),
        one = n(plan.one_at_a_time_messages),
        wear_window = n(plan.wear_window_messages),
        in_flight = WEAR_IN_FLIGHT,
        cycles = n(plan.session_cycles),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_consumer_s_figures_are_read_from_its_output() {
        let output = "received 20000\nspan_us 500000\np50_us 537\np99_us 1200\n";
        let consumed = Consumed::from_output(output, 20_000).unwrap();
        assert_eq!(consumed.per_s, 40_000.0);
        assert_eq!((consumed.p50_us, consumed.p99_us), (537.0, 1200.0));
        let short = Consumed::from_output("received 10\nspan_us 5\np50_us 1\np99_us 1\n", 20);
        assert!(short.is_err_and(|e| e.contains("10 of 20")));
        assert!(Consumed::from_output("received 20\n", 20).is_err());
    }
}
