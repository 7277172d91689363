//! A WebSocket client for the tests, over a blocking TCP socket: the
//! upgrade request written out by hand, every frame masked as a client's
//! must be, and what the broker sends read with the broker's own frame
//! reader. Malformed input is sent as hand-built bytes. A peer a test
//! plays for a bridge takes the server's end the same way.

use std::io::{Read, Write};
use std::net::TcpStream;

use saguin::net::websocket::frame::{self, Reader, Role};

use super::WAIT;

/// RFC 6455's sample key; any 16 bytes in base64 serve.
pub const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
/// The mask every frame here is sent with.
const MASK: [u8; 4] = [0x21, 0x7e, 0x03, 0xc4];

/// An upgrade request for `/mqtt` at `address`, with `extra` header lines
/// (each ending in `\r\n`).
pub fn request(address: &str, extra: &str) -> String {
    format!(
        "GET /mqtt HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n{extra}\r\n"
    )
}

/// Sends `request` on a new connection to `address`; the socket, the
/// answer's head (status line first) and what came after it.
pub fn send_request(address: &str, request: &str) -> (TcpStream, String, Vec<u8>) {
    let mut socket = TcpStream::connect(address).expect("connect to the broker");
    socket.set_nodelay(true).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..at]).into_owned();
            let rest = bytes[at + 4..].to_vec();
            return (socket, head, rest);
        }
        match socket.read(&mut chunk) {
            Ok(0) | Err(_) => {
                return (
                    socket,
                    String::from_utf8_lossy(&bytes).into_owned(),
                    Vec::new(),
                )
            }
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status of an answer's head.
pub fn status(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A connection upgraded at `address`, asserting the 101.
pub fn connect(address: &str) -> Framed {
    let (socket, head, rest) = send_request(address, &request(address, ""));
    assert_eq!(status(&head), 101, "the upgrade was refused: {head}");
    Framed::new(socket, rest)
}

/// A WebSocket connection carrying a byte stream.
pub struct Framed {
    socket: TcpStream,
    role: Role,
    reader: Reader,
    /// Framed bytes read and not yet taken.
    early: Vec<u8>,
}

impl Framed {
    /// The client end of an upgraded connection.
    pub fn new(socket: TcpStream, early: Vec<u8>) -> Framed {
        Framed::with_role(socket, early, Role::Client)
    }

    /// The server end: a peer the test plays answers `socket`'s upgrade.
    pub fn accept(mut socket: TcpStream) -> Framed {
        use saguin::net::websocket::handshake::{answer, Answer};
        use saguin::net::websocket::Origins;
        let mut head = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let n = socket.read(&mut chunk).expect("an upgrade request");
            assert!(n > 0, "closed before its upgrade");
            head.extend_from_slice(&chunk[..n]);
            match answer(&head, &Origins::new(false, Vec::new()), false) {
                Answer::Incomplete => continue,
                Answer::Upgrade {
                    response,
                    head_bytes,
                } => {
                    socket.write_all(&response).unwrap();
                    let early = head.split_off(head_bytes);
                    return Framed::with_role(socket, early, Role::Server);
                }
                refused => panic!("the upgrade was refused: {refused:?}"),
            }
        }
    }

    fn with_role(socket: TcpStream, early: Vec<u8>, role: Role) -> Framed {
        Framed {
            socket,
            role,
            reader: Reader::new(role, u64::MAX >> 1),
            early,
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// One frame whose first byte is `first` (FIN, opcode), carrying
    /// `payload`, masked unless `masked` is false.
    pub fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
        let mask = masked.then_some(MASK);
        let (head, len) = frame::binary_header(payload.len() as u64, mask);
        let mut bytes = head[..len].to_vec();
        bytes[0] = first;
        let start = bytes.len();
        bytes.extend_from_slice(payload);
        if let Some(mask) = mask {
            frame::apply_mask(&mut bytes[start..], mask, 0);
        }
        bytes
    }

    /// Sends bytes as they are, framed or not.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let _ = self.socket.write_all(bytes);
    }

    /// The status of the close frame the broker sent, once one came.
    pub fn close_code(&self) -> Option<u16> {
        self.reader.closed()
    }

    /// Reads until the broker ends the connection; the close code it sent.
    pub fn close_code_at_end(&mut self) -> Option<u16> {
        let mut scratch = [0u8; 4096];
        while let Ok(n) = self.read(&mut scratch) {
            if n == 0 {
                break;
            }
        }
        self.close_code()
    }
}

impl Read for Framed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        frame::read_blocking(&mut self.reader, &mut self.early, &mut self.socket, buf)
    }
}

impl Write for Framed {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let masked = self.role == Role::Client;
        self.socket.write_all(&Framed::frame(0x82, bytes, masked))?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
