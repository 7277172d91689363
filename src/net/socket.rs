//! A connection's two directions, over plain TCP or TLS, so the reader and
//! the writer tasks run the same code on either kind of door.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_net::{Shutdown, TcpStream};
use smol::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

type TlsStream = futures_rustls::server::TlsStream<TcpStream>;

pub enum SocketReader {
    Plain(TcpStream),
    Tls(smol::io::ReadHalf<TlsStream>),
}

pub enum SocketWriter {
    Plain(TcpStream),
    /// The TLS half writes records; the TCP stream under it is kept to end
    /// both directions at once on a close.
    Tls {
        half: smol::io::WriteHalf<TlsStream>,
        tcp: TcpStream,
    },
}

/// A plain connection's two halves: clones of one socket.
pub fn plain(stream: TcpStream) -> (SocketReader, SocketWriter) {
    (
        SocketReader::Plain(stream.clone()),
        SocketWriter::Plain(stream),
    )
}

/// A connection whose handshake completed, over the socket `tcp`.
pub fn tls(stream: TlsStream, tcp: TcpStream) -> (SocketReader, SocketWriter) {
    let (read, write) = smol::io::split(stream);
    (
        SocketReader::Tls(read),
        SocketWriter::Tls { half: write, tcp },
    )
}

impl SocketReader {
    /// Waits until the client has sent something, holding no read buffer
    /// on a plain socket. Over TLS, the bytes on the socket are records
    /// rather than packets, so this returns at once and the caller reads.
    /// Returns the bytes available (0 once the peer has closed).
    pub async fn wait_readable(&mut self) -> io::Result<usize> {
        match self {
            SocketReader::Plain(stream) => stream.peek(&mut [0u8; 1]).await,
            SocketReader::Tls(_) => Ok(1),
        }
    }
}

impl AsyncRead for SocketReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SocketReader::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            SocketReader::Tls(half) => Pin::new(half).poll_read(cx, buf),
        }
    }
}

impl SocketWriter {
    /// Ends the connection in both directions; over TLS, after telling the
    /// client so (close_notify).
    pub async fn end(&mut self) {
        match self {
            SocketWriter::Plain(stream) => {
                let _ = stream.shutdown(Shutdown::Both);
            }
            SocketWriter::Tls { half, tcp } => {
                let _ = half.close().await;
                let _ = tcp.shutdown(Shutdown::Both);
            }
        }
    }
}

impl AsyncWrite for SocketWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SocketWriter::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            SocketWriter::Tls { half, .. } => Pin::new(half).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SocketWriter::Plain(stream) => Pin::new(stream).poll_flush(cx),
            SocketWriter::Tls { half, .. } => Pin::new(half).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SocketWriter::Plain(stream) => Pin::new(stream).poll_close(cx),
            SocketWriter::Tls { half, .. } => Pin::new(half).poll_close(cx),
        }
    }
}
