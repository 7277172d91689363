//! A blocking MQTT client on the crate's own codec, just enough to drive
//! load: CONNECT, SUBSCRIBE, PUBLISH and PUBACK, with batched writes so the
//! load generator spends its share of the two cores on messages, not
//! syscalls. It speaks over plain TCP, over TLS (rustls), over WebSocket
//! (framed by the broker's own frame code, masked as a client must) or
//! over a Unix socket, with or without a user name and password.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use saguin::codec::{
    decode_fixed_header, decode_packet, encode, Connack, Connect, Disconnect, Packet, Properties,
    ProtocolVersion, PubAck, QoS, ReasonCode, Subscribe, SubscriptionOptions,
};
use saguin::net::websocket::frame::{self, Reader, Role};
use saguin::net::websocket::handshake;

/// How long one blocking read waits, so every read loop gets back to its
/// deadline checks often.
pub const READ_POLL: Duration = Duration::from_millis(100);
/// Longest a CONNECT or SUBSCRIBE may take to be answered.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest one write may block; a broker that stops reading for this long
/// has failed the run.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The inbox grows past this only for a packet larger than it.
const INBOX_BYTES: usize = 64 * 1024;

/// How a client introduces itself.
#[derive(Clone, Copy, Debug)]
pub struct ClientOptions {
    pub version: ProtocolVersion,
    pub keep_alive_s: u16,
    /// MQTT 5 Receive Maximum: the most QoS 1 deliveries the broker may
    /// have unacknowledged towards this client.
    pub receive_maximum: Option<u16>,
}

/// How a CONNECT asks for its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStart {
    /// Clean Start 1: nothing is kept once the connection ends.
    Clean,
    /// Clean Start 0 with this Session Expiry Interval (MQTT 5; a 3.1.1
    /// CONNECT carries Clean Session 0 and the broker's own expiry).
    Resume { expiry_s: u32 },
}

/// Where a broker listens and what a client must bring to be let in.
#[derive(Clone)]
pub struct Endpoint {
    pub address: SocketAddr,
    /// TLS towards a server certificate these roots verify.
    pub tls: Option<Arc<ClientConfig>>,
    /// The user name and password every CONNECT carries.
    pub credentials: Option<(String, String)>,
    /// What MQTT travels over: TCP at `address`, or another door.
    pub door: Door,
}

/// What carries MQTT to the broker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Door {
    #[default]
    Tcp,
    /// WebSocket frames over TCP at the endpoint's address.
    WebSocket,
    /// A Unix socket at this path; the address is not used.
    Unix(PathBuf),
}

impl Endpoint {
    pub fn plain(address: SocketAddr) -> Endpoint {
        Endpoint {
            address,
            tls: None,
            credentials: None,
            door: Door::Tcp,
        }
    }
}

/// The byte stream under the MQTT client.
enum Link {
    Plain(TcpStream),
    Tls(Box<TlsLink>),
    WebSocket(Box<WsLink>),
    Unix(UnixStream),
}

/// MQTT over WebSocket frames on a blocking socket: the upgrade asked for
/// by hand, each write one masked binary frame, reads unframed in place.
struct WsLink {
    socket: TcpStream,
    reader: Reader,
    /// Framed bytes that came with the upgrade's answer.
    early: Vec<u8>,
    /// The next frame, masked: kept so a write costs no allocation.
    frame: Vec<u8>,
}

/// A mask for a bench frame: the broker must unmask whatever it is given,
/// so a predictable one measures the same work.
const BENCH_MASK: [u8; 4] = [0x5a, 0xc3, 0x0f, 0x96];

impl WsLink {
    /// Asks `socket` to upgrade within `timeout`.
    fn upgrade(mut socket: TcpStream, timeout: Duration) -> Result<WsLink, String> {
        let host = socket
            .peer_addr()
            .map_err(|e| format!("peer address: {e}"))?
            .to_string();
        let (request, key) = handshake::request(&host, "/mqtt", [0x42; 16]);
        socket
            .write_all(&request)
            .map_err(|e| format!("upgrade request: {e}"))?;
        let deadline = Instant::now() + timeout;
        let mut answer = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(head_bytes) = handshake::check_answer(&answer, &key)? {
                return Ok(WsLink {
                    socket,
                    reader: Reader::new(Role::Client, u64::MAX >> 1),
                    early: answer.split_off(head_bytes),
                    frame: Vec::new(),
                });
            }
            match socket.read(&mut chunk) {
                Ok(0) => return Err("closed during the WebSocket upgrade".into()),
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
                Err(e) if is_timeout(&e) && Instant::now() < deadline => {}
                Err(e) => return Err(format!("WebSocket upgrade: {e}")),
            }
        }
    }

    /// A second handle that only reads, with a reader of its own.
    fn reader_handle(&self) -> std::io::Result<WsLink> {
        Ok(WsLink {
            socket: self.socket.try_clone()?,
            reader: Reader::new(Role::Client, u64::MAX >> 1),
            early: Vec::new(),
            frame: Vec::new(),
        })
    }
}

impl Read for WsLink {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        frame::read_blocking(&mut self.reader, &mut self.early, &mut self.socket, buf)
    }
}

impl Write for WsLink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let (head, len) = frame::binary_header(bytes.len() as u64, Some(BENCH_MASK));
        self.frame.clear();
        self.frame.extend_from_slice(&head[..len]);
        self.frame.extend_from_slice(bytes);
        frame::apply_mask(&mut self.frame[len..], BENCH_MASK, 0);
        self.socket.write_all(&self.frame)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// rustls driven by hand over a blocking socket, so a read waits at most
/// the socket's read timeout and a write goes out whole.
struct TlsLink {
    connection: ClientConnection,
    socket: TcpStream,
}

impl TlsLink {
    /// Completes the handshake within `timeout`.
    fn handshake(
        config: &Arc<ClientConfig>,
        mut socket: TcpStream,
        timeout: Duration,
    ) -> Result<TlsLink, String> {
        let server = ServerName::IpAddress(
            socket
                .peer_addr()
                .map_err(|e| format!("peer address: {e}"))?
                .ip()
                .into(),
        );
        let mut connection = ClientConnection::new(Arc::clone(config), server)
            .map_err(|e| format!("TLS client: {e}"))?;
        let deadline = Instant::now() + timeout;
        while connection.is_handshaking() {
            match connection.complete_io(&mut socket) {
                Ok(_) => {}
                Err(e) if is_timeout(&e) && Instant::now() < deadline => {}
                Err(e) => return Err(format!("TLS handshake: {e}")),
            }
        }
        Ok(TlsLink { connection, socket })
    }

    fn send_pending(&mut self) -> std::io::Result<()> {
        while self.connection.wants_write() {
            self.connection.write_tls(&mut self.socket)?;
        }
        Ok(())
    }
}

impl Read for TlsLink {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.connection.reader().read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                done => return done,
            }
            if self.connection.read_tls(&mut self.socket)? == 0 {
                return Ok(0);
            }
            self.connection
                .process_new_packets()
                .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
            self.send_pending()?;
        }
    }
}

impl Write for TlsLink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.connection.writer().write(buf)?;
        self.send_pending()?;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_pending()
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

impl Link {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Link::Plain(socket) => socket.set_read_timeout(Some(timeout)),
            Link::Tls(tls) => tls.socket.set_read_timeout(Some(timeout)),
            Link::WebSocket(ws) => ws.socket.set_read_timeout(Some(timeout)),
            Link::Unix(socket) => socket.set_read_timeout(Some(timeout)),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Link::Plain(socket) => socket.write_all(bytes),
            Link::Tls(tls) => tls.write_all(bytes),
            Link::WebSocket(ws) => ws.write_all(bytes),
            Link::Unix(socket) => socket.write_all(bytes),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Link::Plain(socket) => socket.read(buf),
            Link::Tls(tls) => tls.read(buf),
            Link::WebSocket(ws) => ws.read(buf),
            Link::Unix(socket) => socket.read(buf),
        }
    }
}

pub struct Client {
    stream: Link,
    version: ProtocolVersion,
    /// Bytes read and not yet decoded live in `inbox[inbox_start..inbox_end]`.
    inbox: Vec<u8>,
    inbox_start: usize,
    inbox_end: usize,
    outbox: Vec<u8>,
}

impl Client {
    /// Opens a TCP connection and completes CONNECT/CONNACK with a clean
    /// session.
    pub fn connect(
        address: SocketAddr,
        client_id: &str,
        options: &ClientOptions,
    ) -> Result<Client, String> {
        Client::connect_to(&Endpoint::plain(address), client_id, options)
    }

    /// As [`Client::connect`], over the endpoint's TLS and with its
    /// credentials where it has them.
    pub fn connect_to(
        endpoint: &Endpoint,
        client_id: &str,
        options: &ClientOptions,
    ) -> Result<Client, String> {
        Client::connect_session(endpoint, client_id, options, SessionStart::Clean)
            .map(|(client, _)| client)
    }

    /// As [`Client::connect_to`], asking for the session `start` says;
    /// returns the client and the CONNACK's Session Present.
    pub fn connect_session(
        endpoint: &Endpoint,
        client_id: &str,
        options: &ClientOptions,
        start: SessionStart,
    ) -> Result<(Client, bool), String> {
        let credentials = endpoint
            .credentials
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_bytes()));
        match Client::open_to(endpoint, client_id, options, credentials, start)? {
            (client, connack) if connack.reason_code == ReasonCode::SUCCESS => {
                Ok((client, connack.session_present))
            }
            (_, connack) => Err(format!(
                "{client_id}: CONNACK refused with {:?}",
                connack.reason_code
            )),
        }
    }

    /// Opens a TCP connection and sends a CONNECT with a clean session,
    /// carrying `credentials` (user name, password) where given; returns
    /// the client with the CONNACK's code, whatever it is.
    pub fn open(
        address: SocketAddr,
        client_id: &str,
        options: &ClientOptions,
        credentials: Option<(&str, &[u8])>,
    ) -> Result<(Client, ReasonCode), String> {
        let (client, connack) = Client::open_to(
            &Endpoint::plain(address),
            client_id,
            options,
            credentials,
            SessionStart::Clean,
        )?;
        Ok((client, connack.reason_code))
    }

    /// As [`Client::open`], over the endpoint's TLS where it has one and
    /// asking for the session `start` says; returns the whole CONNACK.
    fn open_to(
        endpoint: &Endpoint,
        client_id: &str,
        options: &ClientOptions,
        credentials: Option<(&str, &[u8])>,
        start: SessionStart,
    ) -> Result<(Client, Connack), String> {
        let stream = open_link(endpoint).map_err(|e| format!("{client_id}: {e}"))?;
        let mut client = Client::new(stream, options.version);
        let (clean_start, session_expiry_interval_s) = match start {
            SessionStart::Clean => (true, None),
            SessionStart::Resume { expiry_s } => (false, Some(expiry_s)),
        };
        let properties = Properties {
            receive_maximum: options.receive_maximum,
            session_expiry_interval_s,
            ..Properties::default()
        };
        client.queue(&Packet::Connect(Box::new(Connect {
            protocol_version: options.version,
            clean_start,
            keep_alive_s: options.keep_alive_s,
            client_id: client_id.to_string(),
            will: None,
            username: credentials.map(|(user, _)| user.to_string()),
            password: credentials.map(|(_, password)| password.to_vec()),
            properties,
        })));
        client.flush()?;
        match client.wait_for_packet(HANDSHAKE_TIMEOUT)? {
            Packet::Connack(connack) => Ok((client, connack)),
            other => Err(format!("{client_id}: expected a CONNACK, got {other:?}")),
        }
    }

    fn new(stream: Link, version: ProtocolVersion) -> Client {
        Client {
            stream,
            version,
            inbox: Vec::new(),
            inbox_start: 0,
            inbox_end: 0,
            outbox: Vec::new(),
        }
    }

    /// A second handle on the same connection for a thread that only
    /// reads, while this one writes. Call before anything is buffered.
    /// A TLS connection has one session state, so it has no second handle.
    pub fn reader_handle(&self) -> Result<Client, String> {
        let cloned = match &self.stream {
            Link::Plain(socket) => socket.try_clone().map(Link::Plain),
            Link::Unix(socket) => socket.try_clone().map(Link::Unix),
            Link::WebSocket(ws) => ws.reader_handle().map(|ws| Link::WebSocket(Box::new(ws))),
            Link::Tls(_) => {
                return Err("a TLS connection cannot be read from a second thread".into())
            }
        };
        let link = cloned.map_err(|e| format!("clone socket: {e}"))?;
        Ok(Client::new(link, self.version))
    }

    /// Whether this connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Link::Tls(_))
    }

    /// Makes the next reads wait at most `timeout` (at least a
    /// microsecond: a socket takes no zero timeout).
    pub fn set_read_wait(&self, timeout: Duration) -> Result<(), String> {
        self.stream
            .set_read_timeout(timeout.max(Duration::from_micros(1)))
            .map_err(|e| format!("socket options: {e}"))
    }

    /// Subscribes to one filter and checks the broker granted `qos`.
    pub fn subscribe(&mut self, filter: &str, qos: QoS) -> Result<(), String> {
        const PACKET_ID: u16 = 1;
        self.queue(&Packet::Subscribe(Subscribe {
            packet_id: PACKET_ID,
            properties: Properties::default(),
            filters: vec![(
                filter.to_string(),
                SubscriptionOptions {
                    qos,
                    ..SubscriptionOptions::default()
                },
            )],
        }));
        self.flush()?;
        match self.wait_for_packet(HANDSHAKE_TIMEOUT)? {
            Packet::Suback(suback)
                if suback.packet_id == PACKET_ID
                    && suback.reason_codes == [ReasonCode(qos as u8)] =>
            {
                Ok(())
            }
            other => Err(format!("SUBSCRIBE {filter}: unexpected answer {other:?}")),
        }
    }

    /// Appends `packet` to what the next `flush` writes.
    pub fn queue(&mut self, packet: &Packet) {
        encode(packet, self.version, &mut self.outbox);
    }

    pub fn queue_puback(&mut self, packet_id: u16) {
        self.queue(&Packet::Puback(PubAck {
            packet_id,
            ..PubAck::default()
        }));
    }

    /// Writes everything queued in one call.
    pub fn flush(&mut self) -> Result<(), String> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let result = self.stream.write_all(&self.outbox);
        self.outbox.clear();
        result.map_err(|e| format!("write: {e}"))
    }

    /// Reads what has arrived, waiting at most `READ_POLL` (or what
    /// `set_read_wait` set). Returns false
    /// when nothing came in that time; an error when the broker closed.
    pub fn fill(&mut self) -> Result<bool, String> {
        self.make_inbox_room();
        match self.stream.read(&mut self.inbox[self.inbox_end..]) {
            Ok(0) => Err("the broker closed the connection".to_string()),
            Ok(read_bytes) => {
                self.inbox_end += read_bytes;
                Ok(true)
            }
            Err(e) if is_timeout(&e) => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Leaves free space after `inbox_end`: moves undecoded bytes to the
    /// front, and grows only when one packet fills the whole inbox.
    fn make_inbox_room(&mut self) {
        if self.inbox.is_empty() {
            // Allocated on first read, so idle clients stay small.
            self.inbox = vec![0; INBOX_BYTES];
        }
        if self.inbox_start == self.inbox_end {
            self.inbox_start = 0;
            self.inbox_end = 0;
        }
        if self.inbox_end == self.inbox.len() {
            self.inbox.copy_within(self.inbox_start..self.inbox_end, 0);
            self.inbox_end -= self.inbox_start;
            self.inbox_start = 0;
        }
        if self.inbox_end == self.inbox.len() {
            let doubled_bytes = self.inbox.len() * 2;
            self.inbox.resize(doubled_bytes, 0);
        }
    }

    /// The next complete packet already read, if any.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, String> {
        let pending = &self.inbox[self.inbox_start..self.inbox_end];
        let header = match decode_fixed_header(pending) {
            Ok(Some(header)) => header,
            Ok(None) => return Ok(None),
            Err(e) => return Err(format!("bad fixed header from the broker: {e}")),
        };
        if pending.len() < header.packet_len() {
            return Ok(None);
        }
        let body = &pending[header.header_len..header.packet_len()];
        let packet = decode_packet(&header, body, Some(self.version))
            .map_err(|e| format!("bad packet from the broker: {e}"))?;
        self.inbox_start += header.packet_len();
        Ok(Some(packet))
    }

    /// The next packet, reading as needed for at most `timeout`.
    pub fn wait_for_packet(&mut self, timeout: Duration) -> Result<Packet, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(packet) = self.next_packet()? {
                return Ok(packet);
            }
            if Instant::now() >= deadline {
                return Err(format!("no answer from the broker within {timeout:?}"));
            }
            self.fill()?;
        }
    }

    /// Says goodbye so the broker drops the session without a Will; errors
    /// are ignored because the measurement is already over.
    pub fn disconnect(mut self) {
        self.queue(&Packet::Disconnect(Disconnect::default()));
        let _ = self.flush();
    }
}

/// The byte stream to `endpoint`: TCP, then TLS or a WebSocket upgrade if
/// it asks for one; or its Unix socket.
fn open_link(endpoint: &Endpoint) -> Result<Link, String> {
    if let Door::Unix(path) = &endpoint.door {
        let socket =
            UnixStream::connect(path).map_err(|e| format!("connect to {}: {e}", path.display()))?;
        let setup = || -> std::io::Result<()> {
            socket.set_read_timeout(Some(READ_POLL))?;
            socket.set_write_timeout(Some(WRITE_TIMEOUT))
        };
        setup().map_err(|e| format!("socket options: {e}"))?;
        return Ok(Link::Unix(socket));
    }
    let address = endpoint.address;
    let socket = TcpStream::connect_timeout(&address, HANDSHAKE_TIMEOUT)
        .map_err(|e| format!("connect to {address}: {e}"))?;
    set_socket_options(&socket)?;
    match (&endpoint.tls, &endpoint.door) {
        (None, Door::WebSocket) => Ok(Link::WebSocket(Box::new(WsLink::upgrade(
            socket,
            HANDSHAKE_TIMEOUT,
        )?))),
        (None, _) => Ok(Link::Plain(socket)),
        (Some(config), _) => Ok(Link::Tls(Box::new(TlsLink::handshake(
            config,
            socket,
            HANDSHAKE_TIMEOUT,
        )?))),
    }
}

/// Every bench socket: Nagle off, as both brokers' own sockets are, and
/// bounded waits so each loop gets back to its deadline checks.
fn set_socket_options(socket: &TcpStream) -> Result<(), String> {
    let setup = || -> std::io::Result<()> {
        socket.set_nodelay(true)?;
        socket.set_read_timeout(Some(READ_POLL))?;
        socket.set_write_timeout(Some(WRITE_TIMEOUT))
    };
    setup().map_err(|e| format!("socket options: {e}"))
}
