//! What the integration tests share: the real broker binary on a port the
//! kernel picked, a temporary directory per test, and a small MQTT client
//! built on the crate's own codec for packets a stock client will not send.

#![allow(dead_code)]

pub mod certs;
pub mod chromium;
pub mod http;
pub mod mosquitto;
pub mod proxy;
pub mod websocket;
pub mod worst_case;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use saguin::codec::{
    decode_fixed_header, decode_packet, encode, Connect, Packet, Properties, ProtocolVersion,
    Publish, QoS, Subscribe, SubscriptionOptions,
};

/// How long any wait in a test may take before the test fails. Generous,
/// because the armv7 and aarch64 runs are emulated; a passing test never
/// waits this long.
pub const WAIT: Duration = Duration::from_secs(20);

/// A loopback port nothing listens on now; a peer is started on it later.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A directory removed when the test ends.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let unique = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "saguin-test-{label}-{}-{unique}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The broker binary, running on a configuration of the test's own.
pub struct BrokerProcess {
    child: Child,
    pub port: u16,
    /// The directory its configuration (and any storage) lives in, when
    /// the broker owns it; a test restarting a broker owns it instead.
    pub dir: Option<TempDir>,
    log: Receiver<String>,
    pub log_lines: Vec<String>,
}

impl BrokerProcess {
    /// Starts the broker with `extra_broker_yaml` inserted under `broker:`
    /// (indented by two spaces), listening on a port the kernel picks.
    pub fn start(extra_broker_yaml: &str) -> BrokerProcess {
        let dir = TempDir::new("broker");
        let mut broker = BrokerProcess::start_in(dir.path(), extra_broker_yaml, "");
        broker.dir = Some(dir);
        broker
    }

    /// Starts the broker on a configuration written into `dir`, which the
    /// caller keeps: `extra_broker_yaml` goes under `broker:`, `top_yaml`
    /// (channels, say) after it. `{dir}` in either is replaced by `dir`.
    pub fn start_in(dir: &Path, extra_broker_yaml: &str, top_yaml: &str) -> BrokerProcess {
        let dir_text = dir.display().to_string();
        let config = format!(
            "broker:\n  id: test\n  log_level: debug\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n{}{}",
            extra_broker_yaml.replace("{dir}", &dir_text),
            top_yaml.replace("{dir}", &dir_text)
        );
        BrokerProcess::start_with_config(dir, &config)
    }

    /// Starts the broker on `config`, a whole configuration, written into
    /// `dir` as saguin.yaml; it must log the port it bound.
    pub fn start_with_config(dir: &Path, config: &str) -> BrokerProcess {
        let config_path = dir.join("saguin.yaml");
        std::fs::write(&config_path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_saguin"))
            .arg("--config")
            .arg(&config_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the broker");
        let log = forward_lines(child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let mut broker = BrokerProcess {
            child,
            port: 0,
            dir: None,
            log,
            log_lines: Vec::new(),
        };
        let line = broker.wait_for_log("bound to");
        broker.port = port_at_end(&line)
            .parse()
            .expect("a port in the listener line");
        broker
    }

    /// The port of the door named `door`, from its "bound to" log line.
    pub fn door_port(&mut self, door: &str) -> u16 {
        let line = self.wait_for_log(&format!("listener {door} bound to"));
        port_at_end(&line).parse().unwrap()
    }

    /// Sends `signal` (`USR1`, say) to the broker.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} failed");
    }

    /// Waits for a log line containing `needle` and returns it.
    pub fn wait_for_log(&mut self, needle: &str) -> String {
        self.wait_for_nth_log(needle, 1)
    }

    /// Waits for the `nth` log line (counted from 1) containing `needle`
    /// and returns it.
    pub fn wait_for_nth_log(&mut self, needle: &str, nth: usize) -> String {
        self.nth_log_within(needle, nth, WAIT).unwrap_or_else(|| {
            panic!(
                "no log line {nth} containing {needle:?}; log so far:\n{}",
                self.log_lines.join("\n")
            )
        })
    }

    /// A log line containing `needle`, waited for at most `timeout`; none
    /// when it did not come.
    pub fn wait_for_log_within(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        self.nth_log_within(needle, 1, timeout)
    }

    /// The `nth` log line containing `needle`, waited for at most `timeout`.
    fn nth_log_within(&mut self, needle: &str, nth: usize, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut seen = self.log_lines.iter().filter(|l| l.contains(needle));
            if let Some(line) = seen.nth(nth - 1) {
                return Some(line.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.log.recv_timeout(left).ok()?;
            self.log_lines.push(line);
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the process at once, as a power cut or the OOM killer would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port a "bound to" line ends with, in any log format (a logfmt or
/// JSON line closes its message with a quote or a brace).
fn port_at_end(line: &str) -> &str {
    let end = line.trim_end().trim_end_matches(['"', '}']);
    end.rsplit(':').next().unwrap()
}

fn forward_lines(
    stdout: impl Read + Send + 'static,
    stderr: impl Read + Send + 'static,
) -> Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    let err_sender = sender.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = err_sender.send(line);
        }
    });
    receiver
}

/// What a raw client read from the broker.
#[derive(Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Received {
    Packet(Packet),
    /// The broker closed the connection.
    Closed,
}

/// The blocking socket under a raw client: TCP, a Unix socket, or
/// WebSocket frames over TCP.
pub enum Stream {
    Tcp(TcpStream),
    Unix(std::os::unix::net::UnixStream),
    WebSocket(Box<websocket::Framed>),
}

impl Stream {
    fn set_nonblocking(&self, nonblocking: bool) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(nonblocking),
            Stream::Unix(s) => s.set_nonblocking(nonblocking),
            Stream::WebSocket(s) => s.socket().set_nonblocking(nonblocking),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
            Stream::WebSocket(s) => s.socket().set_read_timeout(timeout),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::WebSocket(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(bytes),
            Stream::Unix(s) => s.write(bytes),
            Stream::WebSocket(s) => s.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A minimal MQTT client over a blocking socket, for exact packets.
pub struct RawClient {
    stream: Stream,
    buf: Vec<u8>,
    pub version: ProtocolVersion,
}

impl RawClient {
    pub fn open(address: &str, version: ProtocolVersion) -> RawClient {
        let stream = TcpStream::connect(address).expect("connect to the broker");
        stream.set_nodelay(true).unwrap();
        RawClient::over(Stream::Tcp(stream), version)
    }

    /// A client over a stream already open to the broker.
    pub fn over(stream: Stream, version: ProtocolVersion) -> RawClient {
        RawClient {
            stream,
            buf: Vec::new(),
            version,
        }
    }

    /// A client on the Unix socket at `path`.
    pub fn open_unix(path: &Path, version: ProtocolVersion) -> RawClient {
        let stream = std::os::unix::net::UnixStream::connect(path).expect("connect to the socket");
        RawClient::over(Stream::Unix(stream), version)
    }

    /// Sends CONNECT for `client_id` with a clean session and returns the
    /// CONNACK's reason code.
    pub fn connect_with(&mut self, connect: Connect) -> u8 {
        self.send(&Packet::Connect(Box::new(connect)));
        match self.recv() {
            Received::Packet(Packet::Connack(connack)) => connack.reason_code.0,
            other => panic!("expected a CONNACK, got {other:?}"),
        }
    }

    /// Opens a connection and completes a CONNECT with a clean session.
    pub fn connect(address: &str, version: ProtocolVersion, client_id: &str) -> RawClient {
        let mut client = RawClient::open(address, version);
        client.send(&Packet::Connect(Box::new(connect_packet(
            version, client_id,
        ))));
        match client.recv() {
            Received::Packet(Packet::Connack(connack)) => {
                assert_eq!(connack.reason_code.0, 0, "CONNACK refused: {connack:?}")
            }
            other => panic!("expected a CONNACK, got {other:?}"),
        }
        client
    }

    pub fn send(&mut self, packet: &Packet) {
        let mut bytes = Vec::new();
        encode(packet, self.version, &mut bytes);
        self.send_bytes(&bytes);
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        // The broker may close first; a failed write shows up in recv.
        let _ = self.stream.write_all(bytes);
    }

    /// The next packet, or `Closed`; panics if nothing comes within `WAIT`.
    pub fn recv(&mut self) -> Received {
        self.recv_within(WAIT)
            .unwrap_or_else(|| panic!("nothing received within {WAIT:?}"))
    }

    /// The next packet or `Closed` within `timeout`, or `None`.
    pub fn recv_within(&mut self, timeout: Duration) -> Option<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(header)) = decode_fixed_header(&self.buf) {
                if self.buf.len() >= header.packet_len() {
                    let body = self.buf[header.header_len..header.packet_len()].to_vec();
                    self.buf.drain(..header.packet_len());
                    let packet = decode_packet(&header, &body, Some(self.version))
                        .expect("the broker sent a valid packet");
                    return Some(Received::Packet(packet));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // A zero timeout reads only what the socket already holds.
            self.stream.set_nonblocking(left.is_zero()).unwrap();
            if !left.is_zero() {
                self.stream.set_read_timeout(Some(left)).unwrap();
            }
            let mut chunk = [0u8; 4096];
            let read = self.stream.read(&mut chunk);
            self.stream.set_nonblocking(false).unwrap();
            match read {
                Ok(0) => return Some(Received::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                // A signal to the test process cut the read short: read again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Some(Received::Closed),
            }
        }
    }

    /// Reads until the broker closes the connection, returning what came
    /// before the close.
    pub fn recv_until_closed(&mut self) -> Vec<Packet> {
        let mut packets = Vec::new();
        loop {
            match self.recv() {
                Received::Packet(packet) => packets.push(packet),
                Received::Closed => return packets,
            }
        }
    }

    /// Subscribes to one filter and waits for its SUBACK.
    pub fn subscribe(&mut self, filter: &str, qos: QoS) {
        let options = SubscriptionOptions {
            qos,
            ..SubscriptionOptions::default()
        };
        let subscribe = Subscribe {
            packet_id: 1,
            properties: Properties::default(),
            filters: vec![(filter.into(), options)],
        };
        self.send(&Packet::Subscribe(subscribe));
        assert!(
            matches!(self.recv(), Received::Packet(Packet::Suback(_))),
            "expected a SUBACK"
        );
    }

    /// The TCP socket, for a test that writes to it and never reads.
    pub fn into_stream(self) -> TcpStream {
        match self.stream {
            Stream::Tcp(stream) => stream,
            _ => panic!("into_stream is for a client over TCP"),
        }
    }

    /// A PINGREQ answered by a PINGRESP: the connection is alive and served.
    pub fn assert_alive(&mut self) {
        self.send(&Packet::Pingreq);
        assert_eq!(self.recv(), Received::Packet(Packet::Pingresp));
    }
}

pub fn connect_packet(version: ProtocolVersion, client_id: &str) -> Connect {
    Connect {
        protocol_version: version,
        clean_start: true,
        keep_alive_s: 60,
        client_id: client_id.into(),
        will: None,
        username: None,
        password: None,
        properties: Properties::default(),
    }
}

/// True when the mosquitto command-line clients are installed. When they are
/// not, says so loudly: the test that needed them did not run.
pub fn have_mosquitto_clients(test: &str) -> bool {
    have_tools(
        test,
        &["mosquitto_pub", "mosquitto_sub"],
        "mosquitto-clients",
    )
}

/// True when every one of `tools` can be run; otherwise says loudly that
/// `test` was skipped, and which Debian package brings them.
pub fn have_tools(test: &str, tools: &[&str], package: &str) -> bool {
    let found = tools.iter().all(|tool| {
        Command::new(tool)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    });
    if !found {
        // Written to the real stderr: the test harness captures eprintln!.
        let message = format!(
            "\n*** SKIPPED {test}: {} not installed (apt-get install {package}) ***\n",
            tools.join(", ")
        );
        let _ = std::io::stderr().write_all(message.as_bytes());
    }
    found
}

/// A durable consumer: Clean Start 0 and an hour's session.
pub fn durable_connect(address: &str, client_id: &str) -> (RawClient, bool) {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect: Connect = connect_packet(ProtocolVersion::V5, client_id);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code.0, 0);
            (client, connack.session_present)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

/// Publishes `payloads` at QoS 1 with a bounded window; returns those the
/// broker acknowledged before the connection ended (all, unless it dies).
pub fn publish_all(client: &mut RawClient, topic: &str, payloads: &[Vec<u8>]) -> Vec<Vec<u8>> {
    const WINDOW: usize = 16;
    let mut acknowledged = Vec::new();
    let mut in_flight = std::collections::VecDeque::new();
    let mut sent = 0;
    while acknowledged.len() < payloads.len() {
        while sent < payloads.len() && in_flight.len() < WINDOW {
            let packet_id = (sent % 60_000) as u16 + 1;
            let publish = Publish {
                qos: QoS::AtLeastOnce,
                topic: topic.into(),
                packet_id: Some(packet_id),
                payload: payloads[sent].clone(),
                ..Publish::default()
            };
            client.send(&Packet::Publish(publish));
            in_flight.push_back((packet_id, sent));
            sent += 1;
        }
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) => {
                assert_eq!(ack.reason_code.0, 0, "publish refused: {ack:?}");
                let (packet_id, index) = in_flight.pop_front().expect("an ack for something sent");
                assert_eq!(ack.packet_id, packet_id, "PUBACKs come in order");
                acknowledged.push(payloads[index].clone());
            }
            Received::Closed => break,
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
    acknowledged
}

/// What `saguin --check-config path` printed and how it exited.
pub fn check_config(path: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--check-config")
        .arg(path)
        .output()
        .expect("run saguin --check-config")
}

/// Runs `command` with `input` on its standard input, to its end; what it
/// printed, or why it could not be started (the tool is missing).
pub fn output_with_input(
    command: &mut Command,
    input: &str,
) -> std::io::Result<std::process::Output> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes())?;
    child.wait_with_output()
}

/// Runs `command` to its end and what it printed; a failure (or a tool that
/// is not installed, with `install` saying how to get it) fails the test
/// with its standard error.
pub fn output_of(command: &mut Command, install: &str) -> std::process::Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?} ({install}): {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The next job the worker is sent, acknowledged at the MQTT level so
/// its lease starts.
pub fn take_job(worker: &mut RawClient, early: &mut Vec<Publish>) -> Publish {
    loop {
        let next = match early.pop() {
            Some(job) => Received::Packet(Packet::Publish(job)),
            None => worker.recv(),
        };
        match next {
            Received::Packet(Packet::Publish(job)) => {
                let ack = saguin::codec::PubAck {
                    packet_id: job.packet_id.unwrap(),
                    ..Default::default()
                };
                worker.send(&Packet::Puback(ack));
                return job;
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("the worker was closed"),
        }
    }
}

/// Answers `job` of queue `queue` with `outcome`, waiting for the
/// answer's PUBACK; a job offered meanwhile is kept in `early`.
pub fn answer_job(
    worker: &mut RawClient,
    queue: &str,
    job: &Publish,
    outcome: &str,
    early: &mut Vec<Publish>,
) {
    let mut publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: format!("$saguin/queue/{queue}/response"),
        packet_id: Some(900),
        payload: outcome.as_bytes().to_vec(),
        ..Publish::default()
    };
    publish.properties.correlation_data = job.properties.correlation_data.clone();
    worker.send(&Packet::Publish(publish));
    loop {
        match worker.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == 900 => return,
            Received::Packet(Packet::Publish(job)) => early.push(job),
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while answering"),
        }
    }
}
