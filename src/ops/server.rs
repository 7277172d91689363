//! The operations listener's doors and the thread that serves them.
//!
//! Every door is bound by [`bind`] on the caller's thread, with the MQTT
//! doors, so a port in use is a startup error naming the door. The bound
//! sockets then move to a thread of their own, where one executor serves
//! every connection.
//!
//! `max_connections` are served at once. A newcomer finding them all
//! taken takes the place of the one that has waited longest for a request
//! (an idle keep-alive, a caller sending slowly, a handshake not done),
//! which is closed; only when every one is being answered does it go to
//! the second table, as large, where `/health` is answered and anything
//! else `429`. Past both, and past as many closed connections not yet
//! gone, a socket is closed unanswered. So a supervisor's probe is
//! answered however many strangers hold connections open.
//!
//! A connection is served over any byte stream, so a TLS stream can take
//! a TCP door's place without the routes knowing.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use async_net::unix::UnixListener;
use async_net::TcpListener;
use smol::io::{AsyncRead, AsyncWrite};
use smol::LocalExecutor;

use super::http::{self, ReadBuffer, Request, Response};
use super::link::Link;
use super::operators::{Operators, Reloadable};
use super::proxy;
use super::route::{Certified, Door, DoorKind, Service, ROUTES};
use super::seats::{Scope, Seat, Tables};
use super::Settings;

/// The doors, bound and not yet served.
pub struct Bound {
    tcp: Vec<(Door, std::net::TcpListener)>,
    unix: Vec<(Door, std::os::unix::net::UnixListener)>,
    min_scrape_interval: Duration,
    max_connections: usize,
    files: Vec<Arc<Reloadable>>,
    /// The TCP doors' TLS, re-read on SIGUSR1.
    certificates: Vec<Arc<ServedTls>>,
    resolved: Arc<super::ResolvedConfig>,
    /// The Unix doors' socket files, held from the bind on.
    socket_files: Vec<crate::unix_socket::SocketFile>,
}

/// Re-reads every operators file and every certificate the doors read,
/// on request: the reload signal's part in this listener. Cheap to clone;
/// any thread may call it.
#[derive(Clone, Debug)]
pub struct Reloader {
    files: Vec<Arc<Reloadable>>,
    certificates: Vec<Arc<ServedTls>>,
}

impl Reloader {
    /// Reads each file again, logging what it now holds; a file that
    /// cannot be read or does not check is logged and left as it was.
    /// Each door's certificate and key are read again the same way, one
    /// door at a time: a door whose pair does not read keeps serving the
    /// pair it served.
    pub fn reload(&self) {
        for served in &self.certificates {
            served.reload();
        }
        for file in &self.files {
            match file.reload(ROUTES) {
                Ok(operators) => log::info!(
                    "operations: re-read {}: {} operators",
                    operators.path,
                    operators.len()
                ),
                Err(why) => log::error!(
                    "operations: {} was not re-read, and the operators read before stay in force: the file {why}",
                    file.current().path
                ),
            }
        }
    }
}

/// Binds every door `settings` names. Errors name the door's key.
pub fn bind(settings: &Settings) -> io::Result<Bound> {
    let mut bound = Bound {
        tcp: Vec::new(),
        unix: Vec::new(),
        min_scrape_interval: Duration::from_secs(u64::from(settings.min_scrape_interval_s)),
        max_connections: settings.max_connections,
        files: Vec::new(),
        certificates: Vec::new(),
        resolved: settings.resolved.clone(),
        socket_files: Vec::new(),
    };
    // The block's file is one for every door that names none of its own.
    let shared_file = settings.password_file.clone().map(Reloadable::new);
    bound.files.extend(shared_file.clone());
    let mut door_file = |own: &Option<Arc<Operators>>| match own {
        Some(own) => {
            let file = Reloadable::new(own.clone());
            bound.files.push(file.clone());
            Some(file)
        }
        None => shared_file.clone(),
    };
    let (mut tcp, mut unix) = (Vec::new(), Vec::new());
    for door in &settings.tcp {
        let key = format!("broker.operations.listen.tcp {:?}", door.name);
        let listener = std::net::TcpListener::bind(door.address.as_str())
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| named(&key, &format!("cannot listen on {}", door.address), e))?;
        log::info!(
            "operations door {} bound to {}",
            door.name,
            listener.local_addr()?
        );
        let operators = door_file(&door.password_file);
        let mut served = door_of(&door.name, DoorKind::Tcp, operators);
        served.tls = door.tls.as_ref().map(ServedTls::new);
        bound.certificates.extend(served.tls.clone());
        tcp.push((served, listener));
    }
    for door in &settings.unix {
        let key = format!("broker.operations.listen.unix {:?}", door.name);
        let at = format!("cannot listen on {}", door.path.display());
        let (listener, file) =
            crate::unix_socket::bind(&door.path, door.mode).map_err(|e| named(&key, &at, e))?;
        bound.socket_files.extend(file);
        log::info!(
            "operations door {} bound to {}",
            door.name,
            door.path.display()
        );
        let operators = door_file(&door.password_file);
        let mut served = door_of(&door.name, DoorKind::Unix, operators);
        served.proxy_protocol = door.proxy_protocol;
        unix.push((served, listener));
    }
    bound.tcp = tcp;
    bound.unix = unix;
    Ok(bound)
}

/// A TCP door's TLS as served: what its handshakes run on now, and the
/// files SIGUSR1 reads it again from. The MQTT executor's signal task
/// swaps it; the operations thread reads it at each handshake.
pub struct ServedTls {
    door: String,
    current: std::sync::Mutex<Arc<rustls::ServerConfig>>,
    read_again: super::TlsReader,
    name_of: super::CertificateNamer,
}

impl ServedTls {
    fn new(tls: &super::DoorTls) -> Arc<ServedTls> {
        Arc::new(ServedTls {
            door: tls.door.clone(),
            current: std::sync::Mutex::new(tls.config.clone()),
            read_again: tls.read_again.clone(),
            name_of: tls.name_of.clone(),
        })
    }

    /// What the client certificate a finished handshake verified names;
    /// `None` when the caller presented none.
    fn certified<S>(&self, stream: &futures_rustls::server::TlsStream<S>) -> Option<Certified> {
        let leaf = stream.get_ref().1.peer_certificates()?.first()?;
        Some(match (self.name_of)(leaf.as_ref()) {
            Some(name) => Certified::Named(name),
            None => Certified::Unnamed,
        })
    }

    /// What the next handshake runs on.
    fn current(&self) -> Arc<rustls::ServerConfig> {
        let current = self.current.lock();
        current
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the door's files again and serves them from the next
    /// handshake on; a pair that cannot be served is logged, naming the
    /// key and the file, and the pair served before stays.
    fn reload(&self) {
        match (self.read_again)() {
            Ok(config) => {
                let mut current = self
                    .current
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *current = config;
                drop(current);
                log::info!(
                    "operations: {}: certificate re-read; new connections are served with it",
                    self.door
                );
            }
            Err(why) => {
                log::error!("operations: {why}; the certificate served before stays in force")
            }
        }
    }
}

impl std::fmt::Debug for ServedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServedTls({})", self.door)
    }
}

fn door_of(name: &str, kind: DoorKind, operators: Option<Arc<Reloadable>>) -> Door {
    Door {
        name: name.to_string(),
        kind,
        operators,
        tls: None,
        certificate: None,
        proxy_protocol: false,
    }
}

fn named(key: &str, what: &str, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{key}: {what}: {error}"))
}

impl Bound {
    /// The address each TCP door took, in order: how a test finds port 0.
    pub fn tcp_addresses(&self) -> Vec<std::net::SocketAddr> {
        self.tcp
            .iter()
            .filter_map(|(_, l)| l.local_addr().ok())
            .collect()
    }

    /// What re-reads the doors' operators files and certificates once
    /// they are served.
    pub fn reloader(&self) -> Reloader {
        Reloader {
            files: self.files.clone(),
            certificates: self.certificates.clone(),
        }
    }

    /// Serves every door on a thread of its own until the process ends.
    /// The socket files are removed when the returned guard is dropped.
    pub fn spawn(self, link: Link) -> io::Result<SocketFiles> {
        let files = SocketFiles {
            _held: self.socket_files,
        };
        std::thread::Builder::new()
            .name("saguin-ops".to_string())
            .spawn(move || {
                // One thread for the life of the process: the executor is never freed.
                let executor: &'static LocalExecutor<'static> =
                    Box::leak(Box::new(LocalExecutor::new()));
                let checks = super::password_checks::most_for(self.max_connections);
                let mut service = Service::new(link, self.min_scrape_interval, checks);
                service.resolved = self.resolved;
                let service = Rc::new(service);
                let tables = Rc::new(Tables::new(self.max_connections));
                let mut loops = Vec::new();
                for (door, listener) in self.tcp {
                    let listener = TcpListener::try_from(listener);
                    loops.extend(serve_door(executor, door, listener, &service, &tables));
                }
                for (door, listener) in self.unix {
                    let listener = UnixListener::try_from(listener);
                    loops.extend(serve_door(executor, door, listener, &service, &tables));
                }
                smol::block_on(executor.run(smol::future::pending::<()>()));
                drop(loops);
            })?;
        Ok(files)
    }
}

/// The Unix doors' socket files and their locks: the files are removed,
/// then the locks released, when the broker stops cleanly.
#[must_use = "dropping it removes the socket files at once"]
pub struct SocketFiles {
    _held: Vec<crate::unix_socket::SocketFile>,
}

/// A listening socket of either kind.
trait Accept: 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + 'static;
    fn accept_one(&self) -> impl std::future::Future<Output = io::Result<Self::Stream>> + '_;
}

impl Accept for TcpListener {
    type Stream = async_net::TcpStream;
    async fn accept_one(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Accept for UnixListener {
    type Stream = async_net::unix::UnixStream;
    async fn accept_one(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// Spawns `door`'s accept loop, or logs why its socket could not be
/// handed to the executor.
fn serve_door(
    executor: &'static LocalExecutor<'static>,
    door: Door,
    listener: io::Result<impl Accept>,
    service: &Rc<Service>,
    tables: &Rc<Tables>,
) -> Option<smol::Task<()>> {
    let listener = match listener {
        Ok(listener) => listener,
        Err(e) => {
            log::error!("operations door {}: {e}", door.name);
            return None;
        }
    };
    let (service, tables) = (service.clone(), tables.clone());
    Some(executor.spawn(async move {
        loop {
            match listener.accept_one().await {
                Ok(stream) => {
                    admit(executor, stream, &door, &service, &tables);
                    // The connection told to make room closes, and the
                    // newcomer starts, before the next is accepted.
                    smol::future::yield_now().await;
                }
                Err(e) => pause_after(&door, e).await,
            }
        }
    }))
}

/// Out of descriptors, most likely: wait rather than spin.
async fn pause_after(door: &Door, error: io::Error) {
    log::warn!("operations door {}: accept failed: {error}", door.name);
    smol::Timer::after(Duration::from_millis(100)).await;
}

/// Seats a newcomer and serves it, or closes it unanswered when no seat
/// can be had.
fn admit<S>(
    executor: &'static LocalExecutor<'static>,
    stream: S,
    door: &Door,
    service: &Rc<Service>,
    tables: &Tables,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let Some((held, scope)) = tables.seat() else {
        return;
    };
    let (door, service) = (door.clone(), service.clone());
    executor
        .spawn(async move {
            connection(stream, door, &service, &held.seat, scope).await;
            drop(held);
        })
        .detach();
}

/// One connection, from its TLS handshake or PROXY header to its close.
async fn connection<S>(stream: S, mut door: Door, service: &Service, seat: &Seat, scope: Scope)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match door.tls.clone() {
        None if door.proxy_protocol => {
            let mut stream = stream;
            match seat.unless_evicted(proxied(&mut stream, &door)).await {
                None => {}
                Some(Ok(certificate)) => {
                    door.certificate = certificate;
                    serve(stream, &door, service, seat, scope).await;
                }
                Some(Err(why)) => {
                    let refusal = Response::text(400, format!("{why}\n"));
                    seat.unless_evicted(answer_and_close(&mut stream, &refusal))
                        .await;
                }
            }
        }
        None => serve(stream, &door, service, seat, scope).await,
        Some(tls) => {
            let shaken = seat.unless_evicted(handshake(stream, tls.current(), &door));
            if let Some(Some(stream)) = shaken.await {
                door.certificate = tls.certified(&stream);
                serve(stream, &door, service, seat, scope).await;
            }
        }
    }
}

/// Reads the PROXY v2 header a `proxy_protocol` door's connection starts
/// with: what it names, or, logged, why the connection is refused (no
/// header, v1, unsound, or too slow).
async fn proxied<S: AsyncRead + Unpin>(
    stream: &mut S,
    door: &Door,
) -> Result<Option<Certified>, String> {
    match proxy::read_header(stream).await.map(|header| header.told) {
        Ok(proxy::Told::Nobody) => Ok(None),
        Ok(proxy::Told::Certified(certified)) => Ok(Some(certified)),
        Ok(proxy::Told::Unverified { verify_result }) => {
            log::warn!(
                "operations door {}: the proxy could not verify this client's certificate (verify_result={verify_result}); it names nobody",
                door.name
            );
            Ok(None)
        }
        Err(why) => {
            log::warn!("operations door {}: connection refused: {why}", door.name);
            Err(why)
        }
    }
}

/// How long a TLS handshake may take before the connection is closed.
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// The TLS handshake on a TCP door; `None`, logged, when it fails or takes
/// longer than [`HANDSHAKE_TIMEOUT_MS`].
async fn handshake<S>(
    stream: S,
    config: Arc<rustls::ServerConfig>,
    door: &Door,
) -> Option<futures_rustls::server::TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let accept = futures_rustls::TlsAcceptor::from(config).accept(stream);
    let finished = smol::future::or(async { Some(accept.await) }, async {
        smol::Timer::after(Duration::from_millis(HANDSHAKE_TIMEOUT_MS)).await;
        None
    })
    .await;
    match finished {
        Some(Ok(stream)) => Some(stream),
        Some(Err(error)) => {
            log::info!(
                "operations door {}: a TLS handshake failed: {error}",
                door.name
            );
            None
        }
        None => {
            log::info!(
                "operations door {}: a TLS handshake did not finish in time",
                door.name
            );
            None
        }
    }
}

/// The answer to a route other than `/health` at a full listener.
fn busy() -> Response {
    Response::text(
        429,
        "the operations listener is answering as many requests as it takes, and past them only /health; try again shortly\n",
    )
    .with_header("Retry-After", "1")
}

fn is_health(request: &Request) -> bool {
    request.path == "/health"
}

/// Writes a final response and closes. What the caller sent and was not
/// read is read and discarded for a moment first, so the close does not
/// reset the answer away before the caller has it.
async fn answer_and_close<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, response: &Response) {
    use smol::io::AsyncWriteExt;
    if !http::write_response(stream, response, false, false).await {
        return;
    }
    let _ = stream.close().await;
    http::linger(stream).await;
}

/// Serves requests on one connection until it closes, asks to, goes
/// quiet, reaches [`http::MAX_REQUESTS_PER_CONNECTION`] (one, for
/// [`Scope::HealthOnly`]), or is told to make room while it waits.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    door: &Door,
    service: &Service,
    seat: &Seat,
    scope: Scope,
) {
    let most = match scope {
        Scope::Everything => http::MAX_REQUESTS_PER_CONNECTION,
        Scope::HealthOnly => 1,
    };
    let mut buffer = ReadBuffer::default();
    for served in 1..=most {
        seat.waiting();
        let request = match seat.unless_evicted(buffer.read_request(&mut stream)).await {
            None => return,
            Some(Ok(request)) => request,
            Some(Err(error)) => {
                if let Some(response) = error.response() {
                    seat.unless_evicted(answer_and_close(&mut stream, &response))
                        .await;
                }
                return;
            }
        };
        seat.answering();
        let response = if scope == Scope::HealthOnly && !is_health(&request) {
            busy()
        } else {
            service.respond(&request, door).await
        };
        if request.announces_body {
            // Its body is not read: answered, the rest drained a moment,
            // and closed.
            seat.unless_evicted(answer_and_close(&mut stream, &response))
                .await;
            return;
        }
        let keep_alive = request.keep_alive && served < most;
        let head_only = request.method == "HEAD";
        if !http::write_response(&mut stream, &response, head_only, keep_alive).await || !keep_alive
        {
            return;
        }
    }
}
