//! The I/O shell around the core: one smol executor thread runs the
//! listeners, one future per connection, and the clock.

mod bridge;
mod connection;
mod door;
mod operations;
mod outbox;
mod quick_ack;
mod reload;
mod settings;
mod socket;
mod storage;
pub mod tls;
pub mod websocket;
pub mod worst_case;

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_executor::{LocalExecutor, StaticLocalExecutor};
use async_net::unix::UnixListener;
use async_net::TcpListener;
use async_signal::{Signal, Signals};
use smol::stream::StreamExt;
use smol::Async;

use crate::auth::Authentication;
use crate::core::{Broker, Origin, Source};
use door::Accepted;
use outbox::Outboxes;
pub use settings::{door_label, Door, Listen, Settings};

/// Storage answers handled in one turn of the executor before the
/// connections get theirs.
const COMPLETIONS_PER_TURN: usize = 256;
/// How often the core's clocks (keepalive, connect timeout, expiry) run.
const TICK_MS: u64 = 100;
/// How long a stopping broker waits for its goodbyes to be written.
const SHUTDOWN_FLUSH_MS: u64 = 2_000;
/// Sockets that arrive with every slot taken and are still answered
/// Server Busy, at most; past this they are closed at once.
const OVERFLOW_BUDGET: usize = 32;
/// How long such a socket may take to send the opening of its CONNECT.
const OVERFLOW_WAIT_MS: u64 = 100;

/// Everything the executor thread shares. Only that thread touches it, so
/// a `RefCell` is enough and the core holds no locks.
pub struct Shared {
    pub broker: Broker,
    pub outboxes: Outboxes,
    started: Instant,
    overflow_in_use: usize,
    /// `limits.write_timeout`, the same for every connection: read by a
    /// connection only when a write stalls, so its future does not carry it.
    write_timeout_ms: Option<u64>,
    /// Each door's name by its index, for its connections' log lines.
    door_names: Vec<Rc<str>>,
}

pub type SharedRef = Rc<RefCell<Shared>>;

impl Shared {
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// What the log lines written for connection `key` name now.
    pub fn log_scope(&self, key: crate::core::Key) -> Option<crate::logging::Scope> {
        self.broker.log_scope(key, &self.door_names)
    }
}

/// What one connection may hold at worst: a packet being read, what it is
/// owed up to the bound past which none of its packets is taken plus the
/// largest reply the last one taken may bring, its session's queued
/// deliveries, and its topic aliases.
pub fn worst_case_connection_bytes(settings: &crate::core::Settings) -> u64 {
    let max_packet = u64::from(settings.max_message_size_bytes);
    let aliases =
        u64::from(crate::core::TOPIC_ALIAS_MAXIMUM) * u64::from(settings.max_topic_length);
    max_packet.max(2 * connection::READ_CHUNK_BYTES as u64)
        + connection::OUTBOX_PAUSE_BYTES as u64
        + Broker::largest_reply_bytes(settings)
        + settings.session_queue_bytes
        + aliases
}

/// A new secret for the client ids this start assigns, from the operating
/// system's random source (ring's, which rustls already carries).
fn client_id_key() -> io::Result<crate::core::ClientIdKey> {
    let mut key = [0u8; 32];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut key)
        .map_err(|_| {
            io::Error::other("the operating system gave no random bytes for client ids")
        })?;
    Ok(crate::core::ClientIdKey(key))
}

pub use reload::AclReader;

/// The authorization file in force at startup, and how to read it again.
pub struct AclSource {
    pub acl: crate::acl::Acl,
    pub read: AclReader,
}

/// Binds every door, then serves until SIGTERM or SIGINT (SIGHUP and
/// SIGUSR1 do not stop it), admitting clients by `authentication` and
/// re-reading its password files on SIGUSR1.
pub fn run(settings: Settings, authentication: Authentication) -> io::Result<()> {
    run_with_acl(settings, authentication, None)
}

/// [`run`], with an authorization file in force, re-read on SIGUSR1
/// together with the password files.
pub fn run_with_acl(
    settings: Settings,
    authentication: Authentication,
    acl: Option<AclSource>,
) -> io::Result<()> {
    // Leaked: it serves for the life of the process, and a static one
    // tracks no tasks, which is bytes saved on every connection.
    let executor = LocalExecutor::new().leak();
    smol::block_on(executor.run(serve(executor, settings, authentication, acl)))
}

async fn serve(
    executor: &'static StaticLocalExecutor,
    mut shell: Settings,
    authentication: Authentication,
    acl: Option<AclSource>,
) -> io::Result<()> {
    let (mut storage, completions) = storage::start(&mut shell)?;
    let per_connection_bytes = worst_case::connection_bytes(&shell);
    // A WebSocket frame is bounded as a packet is.
    let max_frame_bytes = u64::from(shell.core.max_message_size_bytes);
    let worst = worst_case::WorstCase::of(&shell);
    log::info!(
        "broker {} starting: at most {} connections, each holding at most {} bytes of buffers and queued \
         deliveries; {} bytes in all at every bound at once, by term:",
        shell.broker_id,
        shell.core.max_connections,
        per_connection_bytes,
        worst.total_bytes(),
    );
    for line in worst.lines().iter().skip(1) {
        log::info!("{}", line.trim_start());
    }
    let mut settings = shell.core;
    settings.start_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    settings.client_id_key = client_id_key()?;
    let restored_sessions = std::mem::take(&mut storage.restored.sessions);
    let restored_retained = std::mem::take(&mut storage.restored.retained);
    let restored_log = std::mem::take(&mut storage.restored.log);
    let restored_holds = std::mem::take(&mut storage.restored.holds);
    // Certificates are read before any port opens: a broker that cannot
    // serve one of its doors does not serve any.
    let tls_doors = load_tls(shell.doors.iter().map(|d| d.tls.clone()).collect())?;
    let bridge_tls = load_bridge_tls(&shell.bridges)?;
    // Caught before any door opens, so a signal sent once the log says a
    // door is bound never meets its default action (ending the process).
    let signals = Signals::new([Signal::Term, Signal::Int, Signal::Hup, Signal::Usr1])?;
    let mut listeners = Vec::new();
    // Held to the end: a clean stop removes the Unix doors' socket files.
    let mut socket_files = Vec::new();
    for door in &shell.doors {
        let (listener, file) = bind(door).await?;
        socket_files.extend(file);
        listeners.push(listener);
    }
    let operations = match &shell.operations {
        Some(settings) => Some(crate::ops::bind(settings)?),
        None => None,
    };
    let _pid_file = match &shell.pid_file {
        Some(path) => Some(PidFile::write(path)?),
        None => None,
    };

    let mut outboxes = Outboxes::new(
        settings.max_connections as usize,
        settings.session_queue_bytes as usize,
    );
    outboxes.storage = storage.handles.clone();
    let shared: SharedRef = Rc::new(RefCell::new(Shared {
        outboxes,
        broker: Broker::new(settings),
        started: Instant::now(),
        overflow_in_use: 0,
        write_timeout_ms: shell.write_timeout_ms,
        door_names: shell.doors.iter().map(|d| d.name.as_str().into()).collect(),
    }));
    {
        // Before any client is accepted: sessions come back, and those
        // whose time ran out while the broker was stopped end.
        let mut guard = shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        log::info!("who may connect: {}", authentication.summary());
        state.broker.set_authentication(Arc::new(authentication));
        state.broker.restore_retained(restored_retained);
        state.broker.restore_sessions(
            restored_sessions,
            &restored_log,
            now_ms,
            &mut state.outboxes,
        );
        state
            .broker
            .restore_holds(restored_holds, now_ms, &mut state.outboxes);
    }
    let read_acl = acl.map(|source| {
        log::info!("{}", reload::put_in_force(&shared, source.acl, "read"));
        source.read
    });
    let mut tasks = Vec::new();
    for ((index, door), listener) in shell.doors.iter().enumerate().zip(listeners) {
        let served = Served::new(index, door, max_frame_bytes);
        let accept = accept_loop(
            executor,
            shared.clone(),
            (served, listener),
            tls_doors.clone(),
            shell.max_connect_rate_per_s,
        );
        tasks.push(executor.spawn(accept));
    }
    // Started before the operations listener, which reads their counters.
    let bridges = bridge::start(executor, &shared, &shell.bridges, bridge_tls);
    let operators_reload = operations.as_ref().map(crate::ops::Bound::reloader);
    // Held to the end: a clean stop removes the operations socket files.
    let _operations_sockets = match operations {
        Some(bound) => {
            let told = operations::Shell {
                broker_id: &shell.broker_id,
                providers: &shell.providers,
                doors: &shell.doors,
            };
            let (answering, sockets) =
                operations::start(executor, &shared, told, &storage, bound, bridges.observer())?;
            tasks.extend(answering);
            Some(sockets)
        }
        None => None,
    };
    tasks.push(executor.spawn(tick_loop(shared.clone())));
    tasks.push(executor.spawn(completion_loop(shared.clone(), completions)));

    let reload = reload::Reload::new(shared.clone(), tls_doors, operators_reload, read_acl);
    wait_for_stop(signals, reload).await;
    bridges.stop(&shared);
    drop(tasks);
    shutdown(&shared).await;
    // Queued writes, the positions just committed among them, land before
    // the threads stop.
    storage.shutdown();
    drop(socket_files);
    log::info!("stopped");
    Ok(())
}

/// A door's listener.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// Binds `door`; the error names it. A Unix door's socket file comes back
/// beside its listener, removed when it is dropped.
async fn bind(door: &Door) -> io::Result<(Listener, Option<crate::unix_socket::SocketFile>)> {
    let named = |error: io::Error, what: &str| {
        io::Error::new(
            error.kind(),
            format!(
                "{} {:?}: cannot listen on {what}: {error}",
                door_label(door.kind(), door.kind()),
                door.name
            ),
        )
    };
    match &door.listen {
        Listen::Tcp { address } | Listen::WebSocket { address, .. } => {
            let listener = TcpListener::bind(address.as_str())
                .await
                .map_err(|error| named(error, address))?;
            // Tests and operators read the bound port here when they asked for port 0.
            log::info!("listener {} bound to {}", door.name, listener.local_addr()?);
            Ok((Listener::Tcp(listener), None))
        }
        Listen::Unix { path, mode, .. } => {
            let shown = path.display().to_string();
            let (listener, file) =
                crate::unix_socket::bind(path, *mode).map_err(|error| named(error, &shown))?;
            let listener =
                UnixListener::try_from(listener).map_err(|error| named(error, &shown))?;
            log::info!("listener {} bound to {shown}", door.name);
            Ok((Listener::Unix(listener), file))
        }
    }
}

impl Listener {
    /// The next socket, as the connection is served over it.
    async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, _peer) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                let Ok(stream) = Arc::try_unwrap(Arc::<Async<std::net::TcpStream>>::from(stream))
                else {
                    unreachable!("a stream just accepted has no other handle")
                };
                Ok(Accepted::Tcp(stream))
            }
            Listener::Unix(listener) => {
                let (stream, _peer) = listener.accept().await?;
                let Ok(stream) =
                    Arc::try_unwrap(Arc::<Async<std::os::unix::net::UnixStream>>::from(stream))
                else {
                    unreachable!("a stream just accepted has no other handle")
                };
                Ok(Accepted::Unix(stream))
            }
        }
    }
}

/// A door as its accept loop serves it.
struct Served {
    index: usize,
    label: Rc<str>,
    websocket: Option<Rc<websocket::Origins>>,
    proxy_protocol: bool,
    max_frame_bytes: u64,
}

impl Served {
    fn new(index: usize, door: &Door, max_frame_bytes: u64) -> Served {
        let (websocket, proxy_protocol) = match &door.listen {
            Listen::Tcp { .. } => (None, false),
            Listen::WebSocket { origins, .. } => (Some(Rc::new(origins.clone())), false),
            Listen::Unix { proxy_protocol, .. } => (None, *proxy_protocol),
        };
        Served {
            index,
            label: door.label().into(),
            websocket,
            proxy_protocol,
            max_frame_bytes,
        }
    }

    /// What the door does with a socket arriving now.
    fn plan(&self, tls: Option<Arc<rustls::ServerConfig>>) -> door::Plan {
        door::Plan {
            door: self.label.clone(),
            tls,
            websocket: self.websocket.clone(),
            proxy_protocol: self.proxy_protocol,
            max_frame_bytes: self.max_frame_bytes,
        }
    }
}

/// Every door's TLS files, read and checked, for the doors' `tls` blocks
/// in door order; the error names the door and the file. `--check-config`
/// calls it too, so a check refuses what a start would.
pub fn load_tls(doors: Vec<Option<tls::TlsSettings>>) -> io::Result<Rc<tls::TlsDoors>> {
    tls::TlsDoors::load(doors, tls::now_unix_s())
        .map(Rc::new)
        .map_err(|message| io::Error::new(io::ErrorKind::InvalidInput, message))
}

/// Every bridge's TLS files, read and checked, in bridge order; the error
/// names every file that cannot be used, with its key. `--check-config`
/// calls it too.
pub fn load_bridge_tls(
    bridges: &[crate::bridge::BridgeSettings],
) -> io::Result<Vec<Option<tls::client::PeerTlsConfig>>> {
    tls::client::load_all(bridges)
        .map_err(|errors| io::Error::new(io::ErrorKind::InvalidInput, errors.join("\n")))
}

async fn accept_loop(
    executor: &'static StaticLocalExecutor,
    shared: SharedRef,
    (door, listener): (Served, Listener),
    tls_doors: Rc<tls::TlsDoors>,
    max_connect_rate_per_s: Option<u32>,
) {
    let mut rate = ConnectRate::new(max_connect_rate_per_s);
    loop {
        rate.wait_for_token().await;
        let accepted = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, most likely: wait rather than spin.
                log::warn!("accept failed: {error}");
                smol::Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        let plan = door.plan(tls_doors.current(door.index));
        // A socket's peer is known now (a Unix socket's is the process at
        // its far end); a proxy's client, once its header is read.
        let source = match &accepted {
            _ if plan.proxy_protocol => None,
            Accepted::Unix(stream) => door::unix_peer(stream.get_ref()).map(Source::Named),
            Accepted::Tcp(_) => peer_of(&accepted),
        };
        // Server Busy is said only where a CONNECT would be read next: not
        // before a TLS handshake (one it would cost for a connection that
        // cannot be served), an upgrade or a PROXY header.
        let answers_busy = plan.tls.is_none() && plan.websocket.is_none() && !plan.proxy_protocol;
        let mut guard = shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        let origin = Origin {
            door: door.index,
            source,
            introduction: None,
        };
        match state.broker.accept(now_ms, origin) {
            Some(key) => {
                let outbox = state.outboxes.insert(key);
                let socket = door::socket(&shared, key, accepted, plan);
                let served = connection::serve(shared.clone(), socket, key, outbox);
                executor.spawn(served).detach();
            }
            None if answers_busy
                && state.overflow_in_use
                    < OVERFLOW_BUDGET.min(state.broker.settings().max_connections as usize) =>
            {
                state.overflow_in_use += 1;
                let shared = shared.clone();
                let wait_ms = OVERFLOW_WAIT_MS.min(state.broker.settings().connect_timeout_ms);
                executor
                    .spawn(async move {
                        connection::refuse_busy(accepted.into_stream(), wait_ms).await;
                        shared.borrow_mut().overflow_in_use -= 1;
                    })
                    .detach();
            }
            // No place even to say so: closed with nothing read or written.
            None => drop(accepted),
        }
    }
}

/// The address a socket's peer has; a Unix socket's has none worth a line.
fn peer_of(accepted: &Accepted) -> Option<Source> {
    match accepted {
        Accepted::Tcp(stream) => stream.get_ref().peer_addr().ok().map(Source::Peer),
        Accepted::Unix(_) => None,
    }
}

/// Hands each storage answer to the core.
async fn completion_loop(
    shared: SharedRef,
    completions: smol::channel::Receiver<(usize, crate::store::Completion)>,
) {
    while let Ok(first) = completions.recv().await {
        {
            // A batch's completions arrive together: they are handled in
            // one turn, under one borrow and one clock read.
            let mut guard = shared.borrow_mut();
            let state = &mut *guard;
            let now_ms = state.now_ms();
            let mut next = Some(first);
            let mut handled = 0;
            while let Some((_provider, completion)) = next {
                state
                    .broker
                    .handle_store_completion(completion, now_ms, &mut state.outboxes);
                handled += 1;
                next = if handled < COMPLETIONS_PER_TURN {
                    completions.try_recv().ok()
                } else {
                    None
                };
            }
        }
        // What is left waits behind the connections' turns.
        if !completions.is_empty() {
            smol::future::yield_now().await;
        }
    }
}

async fn tick_loop(shared: SharedRef) {
    loop {
        smol::Timer::after(Duration::from_millis(TICK_MS)).await;
        let mut guard = shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        state.broker.tick(now_ms, &mut state.outboxes);
        crate::log_limit::report_suppressed(&[&connection::READING_PAUSED], now_ms);
    }
}

/// Serves the signals until SIGTERM or SIGINT. SIGHUP is caught so that
/// it cannot end the broker without its shutdown (a memory provider's
/// snapshot would be lost); SIGUSR1 reloads.
async fn wait_for_stop(mut signals: Signals, mut reload: reload::Reload) {
    while let Some(signal) = signals.next().await {
        match signal {
            Ok(Signal::Hup) => log::warn!(
                "received SIGHUP: ignored; it does not reload the configuration, \
                 SIGUSR1 does, and SIGTERM stops the broker"
            ),
            Ok(Signal::Usr1) => reload.reload().await,
            Ok(signal) => {
                log::info!("received {signal:?}, stopping");
                return;
            }
            Err(error) => log::warn!("reading a signal failed: {error}"),
        }
    }
}

/// Tells every client the broker is stopping and waits, briefly, for those
/// goodbyes to be written.
async fn shutdown(shared: &SharedRef) {
    let outboxes: Vec<outbox::Outbox> = {
        let mut guard = shared.borrow_mut();
        let state = &mut *guard;
        let now_ms = state.now_ms();
        let outboxes = state.outboxes.all().cloned().collect();
        state.broker.shutdown(now_ms, &mut state.outboxes);
        outboxes
    };
    let flushed = async {
        for outbox in &outboxes {
            while !outbox.borrow().dead {
                smol::Timer::after(Duration::from_millis(10)).await;
            }
        }
    };
    smol::future::or(flushed, async {
        smol::Timer::after(Duration::from_millis(SHUTDOWN_FLUSH_MS)).await;
    })
    .await;
}

/// `limits.max_connect_rate`: a token bucket holding up to two seconds of
/// connections. A connection over the rate waits in the kernel's queue.
struct ConnectRate {
    per_s: Option<u32>,
    tokens: f64,
    updated: Instant,
}

impl ConnectRate {
    fn new(per_s: Option<u32>) -> ConnectRate {
        let tokens = per_s.map_or(0.0, |rate| f64::from(rate) * 2.0);
        ConnectRate {
            per_s,
            tokens,
            updated: Instant::now(),
        }
    }

    async fn wait_for_token(&mut self) {
        let Some(per_s) = self.per_s else { return };
        let per_s = f64::from(per_s);
        loop {
            let elapsed_s = self.updated.elapsed().as_secs_f64();
            self.updated = Instant::now();
            self.tokens = (self.tokens + elapsed_s * per_s).min(per_s * 2.0);
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                return;
            }
            let wait_s = (1.0 - self.tokens) / per_s;
            smol::Timer::after(Duration::from_secs_f64(wait_s)).await;
        }
    }
}

/// `broker.pid_file`: written once the signal handlers are in place,
/// removed when the broker stops cleanly.
struct PidFile(std::path::PathBuf);

impl PidFile {
    fn write(path: &std::path::Path) -> io::Result<PidFile> {
        std::fs::write(path, format!("{}\n", std::process::id())).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "broker.pid_file {}: cannot write it: {error}",
                    path.display()
                ),
            )
        })?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
