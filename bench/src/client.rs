//! A blocking MQTT client on the crate's own codec, just enough to drive
//! load: CONNECT, SUBSCRIBE, PUBLISH and PUBACK, with batched writes so the
//! load generator spends its share of the two cores on messages, not
//! syscalls.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use saguin::codec::{
    decode_fixed_header, decode_packet, encode, Connect, Disconnect, Packet, Properties,
    ProtocolVersion, PubAck, QoS, ReasonCode, Subscribe, SubscriptionOptions,
};

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

pub struct Client {
    stream: TcpStream,
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
        match Client::open(address, client_id, options, None)? {
            (client, ReasonCode::SUCCESS) => Ok(client),
            (_, code) => Err(format!("{client_id}: CONNACK refused with {code:?}")),
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
        let stream = TcpStream::connect_timeout(&address, HANDSHAKE_TIMEOUT)
            .map_err(|e| format!("{client_id}: connect to {address}: {e}"))?;
        let mut client = Client::from_stream(stream, options.version)?;
        let properties = Properties {
            receive_maximum: options.receive_maximum,
            ..Properties::default()
        };
        client.queue(&Packet::Connect(Connect {
            protocol_version: options.version,
            clean_start: true,
            keep_alive_s: options.keep_alive_s,
            client_id: client_id.to_string(),
            will: None,
            username: credentials.map(|(user, _)| user.to_string()),
            password: credentials.map(|(_, password)| password.to_vec()),
            properties,
        }));
        client.flush()?;
        match client.wait_for_packet(HANDSHAKE_TIMEOUT)? {
            Packet::Connack(connack) => Ok((client, connack.reason_code)),
            other => Err(format!("{client_id}: expected a CONNACK, got {other:?}")),
        }
    }

    fn from_stream(stream: TcpStream, version: ProtocolVersion) -> Result<Client, String> {
        let setup = |stream: &TcpStream| -> std::io::Result<()> {
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(READ_POLL))?;
            stream.set_write_timeout(Some(WRITE_TIMEOUT))
        };
        setup(&stream).map_err(|e| format!("socket options: {e}"))?;
        Ok(Client {
            stream,
            version,
            inbox: Vec::new(),
            inbox_start: 0,
            inbox_end: 0,
            outbox: Vec::new(),
        })
    }

    /// A second handle on the same connection for a thread that only
    /// reads, while this one writes. Call before anything is buffered.
    pub fn reader_handle(&self) -> Result<Client, String> {
        let stream = self
            .stream
            .try_clone()
            .map_err(|e| format!("clone socket: {e}"))?;
        Client::from_stream(stream, self.version)
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

    /// Reads what has arrived, waiting at most `READ_POLL`. Returns false
    /// when nothing came in that time; an error when the broker closed.
    pub fn fill(&mut self) -> Result<bool, String> {
        self.make_inbox_room();
        match self.stream.read(&mut self.inbox[self.inbox_end..]) {
            Ok(0) => Err("the broker closed the connection".to_string()),
            Ok(read_bytes) => {
                self.inbox_end += read_bytes;
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(false),
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
