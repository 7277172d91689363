//! Starting, finding, probing and stopping the two brokers under test.
//!
//! Both listen on loopback ports the kernel picked. Saguin binds port 0 and
//! logs at `warn`, so its port is read from /proc rather than its log: the
//! listening socket among the process's file descriptors.

use std::fmt;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use saguin::codec::ProtocolVersion;

use crate::client::{Client, ClientOptions, Door, Endpoint};
use crate::tls::ServerCertificate;

/// Longest a broker may take from spawn to answering a CONNECT.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest a broker may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Every limit that could drop or refuse a benchmark message is set well
/// above what the load generator ever has outstanding (at most a few
/// thousand messages), so both brokers deliver everything.
pub const SAGUIN_CONFIG_YAML: &str = "\
broker:
  id: bench
  log_level: warn
  mqtt:
    listen:
      tcp:
        address: 127.0.0.1:0
  limits:
    max_message_size: 1MiB
    max_connections: 2000
    max_connect_rate: none
    session_queue_bytes: 64MiB
";

/// `max_connections` in [`SAGUIN_CONFIG_YAML`].
const BENCH_MAX_CONNECTIONS: usize = 2000;

/// A saguin configuration made from [`SAGUIN_CONFIG_YAML`] with its
/// `max_connections` set to `max_connections`.
fn with_max_connections(config: &str, max_connections: usize) -> String {
    config.replacen(
        &format!("    max_connections: {BENCH_MAX_CONNECTIONS}\n"),
        &format!("    max_connections: {max_connections}\n"),
        1,
    )
}

/// How saguin is set up: as for figures 1 to 5, or with `durable/#`
/// claimed by an append channel on a redb file in the broker's own
/// temporary directory (figure 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaguinSetup {
    /// No storage: every topic is broadcast.
    Plain,
    /// redb with `publish_commit_interval` absent: a publish finding no
    /// commit running is committed at once, and whatever queues while a
    /// commit runs forms the next one (group commit).
    GroupCommit,
    /// redb with `publish_commit_interval: none`: a commit per publish.
    CommitPerPublish,
    /// As `GroupCommit`, with a queue `work` claiming `work/#` (figure 7).
    Queue,
    /// As `Queue`, with sessions kept on the same redb provider (figures
    /// 9 and 10: stock clients, and what reaches the disk).
    Stock,
    /// As `Stock`, committing as the Raspberry Pi 4 profile does: waiting
    /// up to 20 ms for 16 records (figure 10's board rows).
    Pi4Commit,
    /// As `GroupCommit`, with a bridge carrying `durable/#` out to a peer
    /// on this loopback port as `up/...` (figure 11).
    Bridge(u16),
    /// No storage; both brokers check user names against one password
    /// file that `saguin --passwd` wrote, and still admit clients that
    /// offer none (figure 8).
    Passwords,
    /// As `Passwords`, the one user written `--argon2id`, at mosquitto
    /// 2.1's costs (figure 8's argon2id rows, saguin alone: Debian's
    /// mosquitto 2.0 reads no argon2id).
    PasswordsArgon2id,
    /// As `Plain`, with the operations listener on this loopback port and
    /// `channels` append channels `c<i>` on a memory provider (figure 14).
    Operations { port: u16, channels: u32 },
}

/// The one user in figure 8's password file, and its password.
pub const BENCH_USER: &str = "bench";
pub const BENCH_PASSWORD: &str = "bench-password";

/// Figure 8's password file, in the broker's directory.
fn password_file(dir: &Path) -> PathBuf {
    dir.join("clients.passwd")
}

/// Writes figure 8's password file with `saguin --passwd` (`--argon2id`
/// with `argon2id`), readable by mosquitto after it drops to its own user.
fn write_password_file(saguin: &Path, dir: &Path, argon2id: bool) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let path = password_file(dir);
    let mut child = Command::new(saguin)
        .arg("--passwd")
        .arg(&path)
        .args(["add", BENCH_USER])
        .args(argon2id.then_some("--argon2id"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start {} --passwd: {e}", saguin.display()))?;
    let _ = writeln!(child.stdin.take().expect("piped"), "{BENCH_PASSWORD}");
    let output = child
        .wait_with_output()
        .map_err(|e| format!("saguin --passwd: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "saguin --passwd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

/// The topic filter the bench's queue claims, and its name.
pub const QUEUE_FILTER: &str = "work/#";
pub const QUEUE_NAME: &str = "work";

/// The topic filter the bench's append channel claims.
pub const DURABLE_FILTER: &str = "durable/#";

/// The whole saguin configuration for `setup`; the redb file goes in
/// `dir`, which must be absolute (a provider's `file_path` must be).
fn saguin_config(setup: SaguinSetup, dir: &Path) -> String {
    let commit = match setup {
        SaguinSetup::Plain => return SAGUIN_CONFIG_YAML.to_string(),
        SaguinSetup::GroupCommit
        | SaguinSetup::Queue
        | SaguinSetup::Stock
        | SaguinSetup::Bridge(_) => "",
        SaguinSetup::Passwords | SaguinSetup::PasswordsArgon2id => {
            return SAGUIN_CONFIG_YAML.replacen(
                "  mqtt:\n",
                &format!(
                    "  mqtt:\n    password_file: {}\n    allow_anonymous: true\n",
                    password_file(dir).display()
                ),
                1,
            )
        }
        SaguinSetup::Operations { port, channels } => return operations_config(port, channels),
        SaguinSetup::CommitPerPublish => "        publish_commit_interval: none\n",
        SaguinSetup::Pi4Commit => {
            "        publish_commit_interval: 20ms\n        publish_commit_max_records: 16\n"
        }
    };
    let stock = matches!(setup, SaguinSetup::Stock | SaguinSetup::Pi4Commit);
    // `start: tail`: a new reader gets only what is published after it
    // subscribes, so no run is replayed the records of the runs before it.
    format!(
        "{SAGUIN_CONFIG_YAML}  \
         storage:\n    \
           default: local\n    \
           default_retention_period: none\n    \
           default_retention_bytes: none\n    \
           providers:\n      \
             local:\n        \
               type: redb\n        \
               file_path: {}\n        \
               max_bytes: 1GiB\n\
         {commit}\
         {sessions}\
         channels:\n  \
           durable:\n    \
             type: append\n    \
             filter: {DURABLE_FILTER}\n    \
             start: tail\n\
         {extra}",
        dir.join("bench.redb").display(),
        sessions = if stock {
            "  session:\n    storage: local\n"
        } else {
            ""
        },
        extra = match setup {
            SaguinSetup::Queue | SaguinSetup::Stock | SaguinSetup::Pi4Commit => {
                format!("  {QUEUE_NAME}:\n    type: queue\n    filter: {QUEUE_FILTER}\n")
            }
            SaguinSetup::Bridge(port) => format!(
                "bridges:\n  upstream:\n    peer: tcp://127.0.0.1:{port}\n    client_id: bench-gateway\n    \
                 topics:\n      - filter: {DURABLE_FILTER}\n        topic: up/$#\n        direction: out\n"
            ),
            _ => String::new(),
        }
    )
}

/// The plain configuration with `tls` on its one door, serving `served`
/// (the TLS figure).
fn saguin_tls_config(served: &ServerCertificate) -> String {
    SAGUIN_CONFIG_YAML.replacen(
        "        address: 127.0.0.1:0\n",
        &format!(
            "        address: 127.0.0.1:0\n        tls:\n          cert_file: {}\n          key_file: {}\n",
            served.cert.display(),
            served.key.display()
        ),
        1,
    )
}

/// The plain configuration checking every CONNECT against `password_file`
/// and, where given, what `acl_file` grants (the ACL figure).
fn saguin_acl_config(password_file: &Path, acl_file: Option<&Path>) -> String {
    let acl = acl_file.map_or(String::new(), |path| {
        format!("    acl_file: {}\n", path.display())
    });
    SAGUIN_CONFIG_YAML.replacen(
        "  mqtt:\n",
        &format!(
            "  mqtt:\n    password_file: {}\n{acl}",
            password_file.display()
        ),
        1,
    )
}

/// Figure 14's saguin: the operations listener on `port`, and `channels`
/// append channels on a memory provider that keeps nothing.
fn operations_config(port: u16, channels: u32) -> String {
    let mut config = format!(
        "{SAGUIN_CONFIG_YAML}  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:{port}\n"
    );
    if channels > 0 {
        config.push_str("  storage:\n    default: mem\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      mem:\n        type: memory\n        max_bytes: 256MiB\n        snapshot_dir: none\nchannels:\n");
        for i in 0..channels {
            config.push_str(&format!("  c{i}:\n    type: append\n    filter: c{i}/#\n"));
        }
    }
    config
}

/// The same bounds in mosquitto's terms. `max_inflight_messages 100`
/// matches the Receive Maximum of 100 the bench's MQTT 5 subscribers send,
/// which saguin honours; `sys_interval 0` because saguin publishes no $SYS
/// topics; logging only warnings and errors, as saguin's `warn`.
///
/// `max_queued_messages` is 1,000,000 rather than 100,000 because
/// mosquitto 2.0.11 over-counts its queue: in fan-in it logged "Outgoing
/// messages are being dropped" and dropped about 1,000 messages once some
/// 110,000 had passed through one subscriber, with never more than 1,000
/// actually outstanding. No run comes near either bound honestly.
fn mosquitto_config(port: u16, setup: MosquittoSetup, dir: &Path) -> String {
    let persistence = match setup {
        MosquittoSetup::Persistent => format!(
            "persistence true\npersistence_location {}/\n",
            dir.display()
        ),
        MosquittoSetup::Bench | MosquittoSetup::Stock => "persistence false\n".to_string(),
    };
    let nodelay = match setup {
        MosquittoSetup::Bench => "set_tcp_nodelay true\n",
        MosquittoSetup::Stock | MosquittoSetup::Persistent => "",
    };
    format!(
        "listener {port} 127.0.0.1\n\
         allow_anonymous true\n\
         {persistence}\
         max_queued_messages 1000000\n\
         max_inflight_messages 100\n\
         max_packet_size 1048576\n\
         max_connections -1\n\
         {nodelay}\
         sys_interval 0\n\
         log_dest stderr\n\
         log_type error\n\
         log_type warning\n"
    )
}

/// How mosquitto is set up: tuned as for figures 1 to 7, or at its own
/// defaults for the stock clients of figure 8, with or without persistence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MosquittoSetup {
    /// The bench's bounds and `set_tcp_nodelay true`, no persistence.
    Bench,
    /// The bench's bounds; Nagle left on, as mosquitto ships.
    Stock,
    /// As `Stock`, with `persistence true` in its temporary directory.
    Persistent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerKind {
    Saguin,
    /// Another saguin binary, given with `--baseline-bin`, run beside this
    /// one with the same configuration (an older commit, to compare with).
    Baseline,
    Mosquitto,
}

impl BrokerKind {
    pub const BOTH: [BrokerKind; 2] = [BrokerKind::Saguin, BrokerKind::Mosquitto];
    pub const ALL: [BrokerKind; 3] = [
        BrokerKind::Saguin,
        BrokerKind::Baseline,
        BrokerKind::Mosquitto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::Saguin => "saguin",
            BrokerKind::Baseline => "baseline",
            BrokerKind::Mosquitto => "mosquitto",
        }
    }
}

impl fmt::Display for BrokerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` honours a width such as `{:<9}`, so run lines line up.
        f.pad(self.name())
    }
}

/// Where each broker's executable is.
#[derive(Clone, Debug)]
pub struct BrokerBinaries {
    pub saguin: PathBuf,
    pub mosquitto: PathBuf,
    /// `--baseline-bin`: an older saguin to run beside this one.
    pub baseline: Option<PathBuf>,
}

impl BrokerBinaries {
    pub fn path(&self, kind: BrokerKind) -> &Path {
        match kind {
            BrokerKind::Saguin => &self.saguin,
            BrokerKind::Baseline => self
                .baseline
                .as_deref()
                .expect("a baseline broker is started only with --baseline-bin"),
            BrokerKind::Mosquitto => &self.mosquitto,
        }
    }

    /// The brokers a comparison runs, in the order runs alternate:
    /// saguin, the baseline when given, then `others`.
    pub fn saguins_then(&self, others: &[BrokerKind]) -> Vec<BrokerKind> {
        let mut kinds = vec![BrokerKind::Saguin];
        if self.baseline.is_some() {
            kinds.push(BrokerKind::Baseline);
        }
        kinds.extend_from_slice(others);
        kinds
    }
}

/// What a client must bring to a broker: TLS towards its certificate, a
/// user name and password, and the door it comes through.
#[derive(Clone, Default)]
pub struct Access {
    pub tls: Option<Arc<ClientConfig>>,
    pub credentials: Option<(String, String)>,
    pub door: Door,
}

/// A door other than plain TCP, for figure 15.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchDoor {
    WebSocket,
    Unix,
}

/// The plain configuration with its one door `door` instead of TCP, the
/// socket (for a Unix door) in `dir`.
fn saguin_door_config(door: BenchDoor, dir: &Path) -> String {
    let listen = match door {
        BenchDoor::WebSocket => {
            "      ws:\n        address: 127.0.0.1:0\n        same_origin: false\n".to_string()
        }
        BenchDoor::Unix => format!(
            "      unix:\n        path: {}\n",
            unix_socket(dir).display()
        ),
    };
    SAGUIN_CONFIG_YAML.replacen("      tcp:\n        address: 127.0.0.1:0\n", &listen, 1)
}

/// mosquitto's lines for `door`, after the TCP listener on `tcp_port` it
/// needs beside a WebSocket one (2.0.11 starts no WebSocket listener
/// alone, and serves one on an address only with `socket_domain ipv4`).
fn mosquitto_door_lines(door: BenchDoor, port: u16, dir: &Path) -> String {
    match door {
        BenchDoor::WebSocket => {
            format!("listener {port} 127.0.0.1\nprotocol websockets\nsocket_domain ipv4\n")
        }
        BenchDoor::Unix => format!("listener 0 {}\n", unix_socket(dir).display()),
    }
}

fn unix_socket(dir: &Path) -> PathBuf {
    dir.join("mqtt.sock")
}

/// The saguin configuration, for BENCHMARKS.md, with a placeholder for
/// the temporary directory.
pub fn saguin_config_text(setup: SaguinSetup) -> String {
    saguin_config(setup, Path::new("/<temporary directory>"))
        .replace("/<temporary directory>", "<temporary directory>")
}

/// The TLS figure's configurations of saguin and mosquitto, for
/// BENCHMARKS.md, with placeholders for the temporary files.
pub fn tls_config_texts() -> (String, String) {
    let dir = Path::new("<temporary directory>");
    let placeholder = ServerCertificate {
        authority: dir.join("bench-ca.pem"),
        cert: dir.join("broker.pem"),
        key: dir.join("broker-key.pem"),
    };
    (
        saguin_tls_config(&placeholder),
        mosquitto_config_text() + &mosquitto_tls_lines(&placeholder),
    )
}

/// The ACL figure's saguin configuration, for BENCHMARKS.md; the run
/// without the file leaves out its `acl_file` line.
pub fn acl_config_text() -> String {
    let dir = Path::new("<temporary directory>");
    saguin_acl_config(&dir.join("clients.passwd"), Some(&dir.join("acl.yaml")))
}

/// The mosquitto configuration with a placeholder port, for BENCHMARKS.md.
pub fn mosquitto_config_text() -> String {
    mosquitto_config(0, MosquittoSetup::Bench, Path::new("")).replacen(
        "listener 0",
        "listener <free port>",
        1,
    )
}

/// Where the brokers' temporary directories, and figure 6's redb file,
/// are made.
pub fn temp_root() -> PathBuf {
    std::env::temp_dir()
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Result<TempDir, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = temp_root().join(format!(
            "saguin-bench-{label}-{}-{unique}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        // Absolute even under a relative TMPDIR: saguin refuses a relative
        // `file_path`.
        let path = fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(TempDir(path))
    }

    /// Absolute.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A running broker, killed when dropped.
pub struct Broker {
    pub kind: BrokerKind,
    pub address: SocketAddr,
    access: Access,
    child: Child,
    dir: TempDir,
}

impl Broker {
    /// Starts `kind` on a loopback port and waits until it answers a CONNECT.
    pub fn start(kind: BrokerKind, binaries: &BrokerBinaries) -> Result<Broker, String> {
        Broker::start_with(kind, binaries, SaguinSetup::Plain)
    }

    /// As [`Broker::start`], saguin set up as `setup`; mosquitto without
    /// persistence.
    pub fn start_with(
        kind: BrokerKind,
        binaries: &BrokerBinaries,
        setup: SaguinSetup,
    ) -> Result<Broker, String> {
        Broker::start_as(kind, binaries, setup, MosquittoSetup::Bench)
    }

    /// As [`Broker::start_with`], mosquitto set up as `mosquitto`.
    pub fn start_as(
        kind: BrokerKind,
        binaries: &BrokerBinaries,
        setup: SaguinSetup,
        mosquitto: MosquittoSetup,
    ) -> Result<Broker, String> {
        let dir = TempDir::new(kind.name())?;
        let passwords = matches!(
            setup,
            SaguinSetup::Passwords | SaguinSetup::PasswordsArgon2id
        );
        if passwords {
            write_password_file(
                &binaries.saguin,
                &dir.0,
                setup == SaguinSetup::PasswordsArgon2id,
            )?;
        }
        let (config, port) = match kind {
            BrokerKind::Saguin | BrokerKind::Baseline => (saguin_config(setup, &dir.0), None),
            BrokerKind::Mosquitto => {
                if mosquitto == MosquittoSetup::Persistent {
                    // Started as root, mosquitto drops to its own user, which
                    // must be able to write its database into the directory.
                    use std::os::unix::fs::PermissionsExt;
                    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o777))
                        .map_err(|e| format!("chmod {}: {e}", dir.0.display()))?;
                }
                let port = free_loopback_port()?;
                let mut config = mosquitto_config(port, mosquitto, &dir.0);
                if passwords {
                    config.push_str(&format!(
                        "password_file {}\n",
                        password_file(&dir.0).display()
                    ));
                }
                (config, Some(port))
            }
        };
        // The operations door listens too, and is not the MQTT one.
        let not_mqtt = match setup {
            SaguinSetup::Operations { port, .. } if kind == BrokerKind::Saguin => Some(port),
            _ => None,
        };
        let ports = (port, not_mqtt);
        Broker::launch(kind, binaries, dir, &config, ports, Access::default())
    }

    /// `kind` serving TLS on its one door with `served`, set up otherwise
    /// as for figures 1 to 5; clients trust `client`'s roots.
    pub fn start_tls(
        kind: BrokerKind,
        binaries: &BrokerBinaries,
        served: &ServerCertificate,
        client: Arc<ClientConfig>,
    ) -> Result<Broker, String> {
        let tls = Some((served, client));
        Broker::start_admitting(kind, binaries, BENCH_MAX_CONNECTIONS, tls)
    }

    /// `kind` set up as for figures 1 to 5, or as for figure 13 when `tls`
    /// is given, with saguin admitting `max_connections` clients (figure
    /// 16's storm); mosquitto admits any number (`max_connections -1`).
    pub fn start_admitting(
        kind: BrokerKind,
        binaries: &BrokerBinaries,
        max_connections: usize,
        tls: Option<(&ServerCertificate, Arc<ClientConfig>)>,
    ) -> Result<Broker, String> {
        let dir = TempDir::new(kind.name())?;
        let (config, port) = match kind {
            BrokerKind::Saguin | BrokerKind::Baseline => {
                let config = match &tls {
                    Some((served, _)) => saguin_tls_config(served),
                    None => SAGUIN_CONFIG_YAML.to_string(),
                };
                (with_max_connections(&config, max_connections), None)
            }
            BrokerKind::Mosquitto => {
                let port = free_loopback_port()?;
                let mut config = mosquitto_config(port, MosquittoSetup::Bench, &dir.0);
                if let Some((served, _)) = &tls {
                    config.push_str(&mosquitto_tls_lines(served));
                }
                (config, Some(port))
            }
        };
        let access = Access {
            tls: tls.map(|(_, client)| client),
            ..Access::default()
        };
        Broker::launch(kind, binaries, dir, &config, (port, None), access)
    }

    /// `kind` on its one door of `door`, set up otherwise as for figures 1
    /// to 5 (figure 15).
    pub fn start_door(
        kind: BrokerKind,
        binaries: &BrokerBinaries,
        door: BenchDoor,
    ) -> Result<Broker, String> {
        let dir = TempDir::new(kind.name())?;
        let socket = unix_socket(&dir.0);
        let access = Access {
            door: match door {
                BenchDoor::WebSocket => Door::WebSocket,
                BenchDoor::Unix => Door::Unix(socket),
            },
            ..Access::default()
        };
        let (config, ports) = match kind {
            BrokerKind::Saguin | BrokerKind::Baseline => {
                (saguin_door_config(door, &dir.0), (None, None))
            }
            BrokerKind::Mosquitto => {
                // mosquitto binds its Unix socket as its own user.
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o777))
                    .map_err(|e| format!("chmod {}: {e}", dir.0.display()))?;
                let (tcp_port, door_port) = (free_loopback_port()?, free_loopback_port()?);
                let mut config = mosquitto_config(tcp_port, MosquittoSetup::Bench, &dir.0);
                config.push_str(&mosquitto_door_lines(door, door_port, &dir.0));
                (config, (Some(door_port), Some(tcp_port)))
            }
        };
        Broker::launch(kind, binaries, dir, &config, ports, access)
    }

    /// Saguin checking every CONNECT against `password_file`, with
    /// `acl_file` in force where given; clients log in as `credentials`.
    pub fn start_with_acl(
        binaries: &BrokerBinaries,
        password_file: &Path,
        acl_file: Option<&Path>,
        credentials: (String, String),
    ) -> Result<Broker, String> {
        let kind = BrokerKind::Saguin;
        let dir = TempDir::new(kind.name())?;
        let config = saguin_acl_config(password_file, acl_file);
        let access = Access {
            credentials: Some(credentials),
            ..Access::default()
        };
        Broker::launch(kind, binaries, dir, &config, (None, None), access)
    }

    /// Saguin on the configuration `config` writes for the broker's own
    /// (absolute) directory, with `not_mqtt` a port it listens on that is
    /// not the MQTT one.
    pub fn start_saguin_on(
        binaries: &BrokerBinaries,
        config: impl FnOnce(&Path) -> Result<String, String>,
        not_mqtt: Option<u16>,
    ) -> Result<Broker, String> {
        let kind = BrokerKind::Saguin;
        let dir = TempDir::new(kind.name())?;
        let config = config(&dir.0)?;
        Broker::launch(
            kind,
            binaries,
            dir,
            &config,
            (None, not_mqtt),
            Access::default(),
        )
    }

    /// Starts `kind` on `config` in `dir` and waits until it answers a
    /// CONNECT made with `access`. Saguin binds port 0; mosquitto the first
    /// of `ports`; the second is a port saguin listens on that is not MQTT.
    fn launch(
        kind: BrokerKind,
        binaries: &BrokerBinaries,
        dir: TempDir,
        config: &str,
        (port, not_mqtt): (Option<u16>, Option<u16>),
        access: Access,
    ) -> Result<Broker, String> {
        let child = spawn(kind, binaries.path(kind), &dir.0, config)?;
        let mut broker = Broker {
            kind,
            address: SocketAddr::from(([127, 0, 0, 1], port.unwrap_or(0))),
            access,
            child,
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        // A Unix door has no port to find: the CONNECT says it serves.
        if !matches!(broker.access.door, Door::Unix(_)) {
            let port = broker.wait_for_listening_port(deadline, not_mqtt)?;
            broker.address.set_port(port);
        }
        broker.wait_until_serving(deadline)?;
        Ok(broker)
    }

    /// How a load reaches this broker.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            address: self.address,
            tls: self.access.tls.clone(),
            credentials: self.access.credentials.clone(),
            door: self.access.door.clone(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the broker's own output so far holds `needle`.
    pub fn output_contains(&self, needle: &str) -> bool {
        fs::read_to_string(self.dir.0.join("output.log")).is_ok_and(|text| text.contains(needle))
    }

    /// Fails with the broker's own output when it has exited.
    fn check_running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "{} exited ({status}); its output:\n{}",
                self.kind,
                self.output_tail()
            )),
            Err(e) => Err(format!("{}: wait: {e}", self.kind)),
        }
    }

    fn output_tail(&self) -> String {
        const TAIL_BYTES: usize = 4000;
        let text = fs::read_to_string(self.dir.0.join("output.log")).unwrap_or_default();
        let start = text.len().saturating_sub(TAIL_BYTES);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }

    fn wait_for_listening_port(
        &mut self,
        deadline: Instant,
        not_mqtt: Option<u16>,
    ) -> Result<u16, String> {
        loop {
            self.check_running()?;
            if let Some(port) = listening_port(self.pid(), not_mqtt) {
                return Ok(port);
            }
            if Instant::now() >= deadline {
                return Err(format!("{} opened no listening socket in time", self.kind));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Ready means a full CONNECT/CONNACK round trip, not just a bound port.
    fn wait_until_serving(&mut self, deadline: Instant) -> Result<(), String> {
        let options = ClientOptions {
            version: ProtocolVersion::V311,
            keep_alive_s: 60,
            receive_maximum: None,
        };
        loop {
            self.check_running()?;
            match Client::connect_to(&self.endpoint(), "bench-ready-probe", &options) {
                Ok(client) => {
                    client.disconnect();
                    return Ok(());
                }
                Err(error) if Instant::now() >= deadline => {
                    return Err(format!("{} never answered a CONNECT: {error}", self.kind))
                }
                Err(_) => std::thread::sleep(POLL_INTERVAL),
            }
        }
    }

    /// Resident set size from /proc/PID/status.
    pub fn rss_bytes(&self) -> Result<u64, String> {
        let path = format!("/proc/{}/status", self.pid());
        let status = fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
        vm_rss_bytes(&status).ok_or_else(|| format!("no VmRSS line in {path}"))
    }

    /// Bytes the broker has caused to be written to the storage device so
    /// far (`write_bytes` of /proc/PID/io): pages it dirtied, counted once
    /// each until written back.
    pub fn device_write_bytes(&self) -> Result<u64, String> {
        let path = format!("/proc/{}/io", self.pid());
        let io = fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
        io.lines()
            .find_map(|line| line.strip_prefix("write_bytes:"))
            .and_then(|rest| rest.trim().parse().ok())
            .ok_or_else(|| format!("no write_bytes line in {path}"))
    }

    /// User plus system CPU time the broker has used so far.
    pub fn cpu_time(&self, clock_ticks_per_s: u64) -> Option<Duration> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        // Fields after the command name, which may itself hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the whole line, so 12
        // and 13 after the state field at index 0 here.
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_micros(ticks * 1_000_000 / clock_ticks_per_s))
    }

    /// The broker's own temporary directory (its configuration, output
    /// and any storage file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGTERM, then SIGKILL if it has not exited within `STOP_TIMEOUT`.
    pub fn stop(mut self) {
        self.terminate();
        // Drop kills it if it is still there.
    }

    /// Stops the broker as [`Broker::stop`] does, leaves it down for
    /// `down`, and starts it again on the same configuration, directory and
    /// port (a persistent mosquitto comes back with what it saved), waiting
    /// until it serves.
    pub fn restart(&mut self, binaries: &BrokerBinaries, down: Duration) -> Result<(), String> {
        self.terminate();
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down);
        let file = match self.kind {
            BrokerKind::Saguin | BrokerKind::Baseline => "saguin.yaml",
            BrokerKind::Mosquitto => "mosquitto.conf",
        };
        let path = self.dir.0.join(file);
        let config =
            fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        self.child = spawn(self.kind, binaries.path(self.kind), &self.dir.0, &config)?;
        self.wait_until_serving(Instant::now() + START_TIMEOUT)
    }

    /// SIGTERM, and a wait of at most `STOP_TIMEOUT` for the exit.
    fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `VmRSS:` line of a /proc/PID/status text, in bytes.
pub fn vm_rss_bytes(status: &str) -> Option<u64> {
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB")?.trim().parse().ok())?;
    Some(kib * 1024)
}

/// Output goes to a file, never a pipe: an undrained pipe would stall the
/// broker the moment it logged more than the pipe holds.
pub fn output_file(dir: &Path) -> Result<(Stdio, Stdio), String> {
    let path = dir.join("output.log");
    let file = fs::File::create(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
    let second = file
        .try_clone()
        .map_err(|e| format!("clone {}: {e}", path.display()))?;
    Ok((Stdio::from(file), Stdio::from(second)))
}

/// Starts `binary` on `config`, written into `dir`.
fn spawn(kind: BrokerKind, binary: &Path, dir: &Path, config: &str) -> Result<Child, String> {
    let (file, flag) = match kind {
        BrokerKind::Saguin | BrokerKind::Baseline => ("saguin.yaml", "--config"),
        BrokerKind::Mosquitto => ("mosquitto.conf", "-c"),
    };
    let config_path = dir.join(file);
    fs::write(&config_path, config).map_err(|e| format!("write config: {e}"))?;
    let (stdout, stderr) = output_file(dir)?;
    Command::new(binary)
        .arg(flag)
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|e| {
            format!(
                "start {}: {e} (cargo build --release --workspace; apt-get install mosquitto)",
                binary.display()
            )
        })
}

/// mosquitto's lines for TLS on the listener above them.
fn mosquitto_tls_lines(served: &ServerCertificate) -> String {
    format!(
        "certfile {}\nkeyfile {}\n",
        served.cert.display(),
        served.key.display()
    )
}

/// A loopback port free a moment ago. Another process could take it
/// before mosquitto binds it; the start then fails visibly, not silently.
pub fn free_loopback_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("local address: {e}"))?
        .port();
    drop(listener);
    Ok(port)
}

/// The port of a TCP socket that process `pid` listens on: its socket
/// inodes from /proc/PID/fd matched against the LISTEN rows (state 0A) of
/// /proc/PID/net/tcp; never `except`.
fn listening_port(pid: u32, except: Option<u16>) -> Option<u16> {
    let socket_inodes: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|entry| fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let table = fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    table.lines().skip(1).find_map(|row| {
        let columns: Vec<&str> = row.split_whitespace().collect();
        let (local, state, inode) = (columns.get(1)?, columns.get(3)?, columns.get(9)?);
        if *state != "0A" || !socket_inodes.iter().any(|i| i == inode) {
            return None;
        }
        u16::from_str_radix(local.rsplit_once(':')?.1, 16)
            .ok()
            .filter(|port| Some(*port) != except)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_size_is_read_from_a_status_text() {
        let status = "Name:\tsaguin\nVmPeak:\t  20000 kB\nVmRSS:\t    6144 kB\nThreads:\t3\n";
        assert_eq!(vm_rss_bytes(status), Some(6144 * 1024));
        assert_eq!(vm_rss_bytes("Name:\tsaguin\n"), None);
        assert_eq!(vm_rss_bytes("VmRSS:\t6144 pages\n"), None);
    }

    #[test]
    fn a_storm_broker_admits_the_connections_it_is_given() {
        let config = with_max_connections(SAGUIN_CONFIG_YAML, 12_000);
        assert!(config.contains("    max_connections: 12000\n"), "{config}");
        assert!(!config.contains("max_connections: 2000"), "{config}");
        let served = ServerCertificate {
            authority: PathBuf::from("/ca.pem"),
            cert: PathBuf::from("/cert.pem"),
            key: PathBuf::from("/key.pem"),
        };
        let tls = with_max_connections(&saguin_tls_config(&served), 12_000);
        assert!(
            tls.contains("    max_connections: 12000\n") && tls.contains("cert_file: /cert.pem")
        );
    }
}
