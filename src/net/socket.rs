//! The byte stream a connection runs MQTT over, and the opening that
//! leads to it: a TLS handshake, a WebSocket upgrade, a PROXY header, or
//! none of them. A plain TCP socket is held as it is, since most
//! connections are one; every other kind sits behind one pointer, so a
//! plain connection pays nothing for the others.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use smol::io::{AsyncRead, AsyncWrite};
use smol::Async;

use super::quick_ack;
use super::websocket::WsStream;

/// A byte stream a connection can be served over, whatever carries it.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin {
    /// Has what was read acknowledged at once (see `quick_ack`); a stream
    /// with no TCP under it has nothing to do.
    fn acknowledge_now(&self) {}
    /// Ends the underlying socket in both directions, at once.
    fn shutdown(&self);
}

impl Duplex for Async<TcpStream> {
    fn acknowledge_now(&self) {
        quick_ack::acknowledge_now(self.get_ref());
    }

    fn shutdown(&self) {
        let _ = self.get_ref().shutdown(Shutdown::Both);
    }
}

impl Duplex for Async<UnixStream> {
    fn shutdown(&self) {
        let _ = self.get_ref().shutdown(Shutdown::Both);
    }
}

impl<S: Duplex> Duplex for futures_rustls::server::TlsStream<S> {
    fn acknowledge_now(&self) {
        self.get_ref().0.acknowledge_now();
    }

    fn shutdown(&self) {
        self.get_ref().0.shutdown();
    }
}

impl Duplex for Box<dyn Duplex> {
    fn acknowledge_now(&self) {
        (**self).acknowledge_now();
    }

    fn shutdown(&self) {
        (**self).shutdown();
    }
}

/// A bridge's socket to its peer.
impl Duplex for async_net::TcpStream {
    fn shutdown(&self) {
        let _ = async_net::TcpStream::shutdown(self, Shutdown::Both);
    }
}

impl Duplex for futures_rustls::client::TlsStream<async_net::TcpStream> {
    fn shutdown(&self) {
        Duplex::shutdown(self.get_ref().0);
    }
}

impl<S: Duplex> Duplex for WsStream<S> {
    fn acknowledge_now(&self) {
        self.get_ref().acknowledge_now();
    }

    fn shutdown(&self) {
        self.get_ref().shutdown();
    }
}

/// What an opening leads to: the stream, and what it learnt of the client
/// for the core.
pub struct Opened {
    pub stream: Box<dyn Duplex>,
    pub learnt: Learnt,
}

/// What an opening learnt of the client, for the core.
#[derive(Default)]
pub struct Learnt {
    /// The name of a client certificate verified in the opening (by this
    /// broker's handshake, or by the proxy in front).
    pub certified: Option<Box<str>>,
    /// Where the client really comes from, where the socket does not say.
    pub source: Option<crate::core::Source>,
}

/// A connection's opening under way. It runs in the connection's slot, so
/// the core's connect timeout (or a shutdown) bounds it as it bounds a
/// CONNECT. It logs its own failures, and `None` is one.
pub struct Opening {
    future: Pin<Box<dyn Future<Output = Option<Opened>>>>,
    /// What it is doing now, for the line that says it took too long.
    stage: Rc<Cell<&'static str>>,
    door: Rc<str>,
    peer: String,
}

impl Opening {
    /// `open` runs the opening; it is handed the cell it tells its stage in.
    pub fn new<F>(
        door: Rc<str>,
        peer: String,
        open: impl FnOnce(Rc<Cell<&'static str>>) -> F,
    ) -> Opening
    where
        F: Future<Output = Option<Opened>> + 'static,
    {
        let stage = Rc::new(Cell::new("opening"));
        Opening {
            future: Box::pin(open(stage.clone())),
            stage,
            door,
            peer,
        }
    }
}

/// The socket under a connection. Two variants, one of them a pointer,
/// keep it as small as the plain socket alone: a third would cost every
/// connection's future 8 B for its tag.
pub enum Socket {
    Plain(Async<TcpStream>),
    Layered(Box<Layered>),
}

pub enum Layered {
    /// Boxed again: an opening is 64 B and lasts a moment, and an open
    /// stream would carry that size for the connection's life.
    Opening(Box<Opening>),
    Open(Box<dyn Duplex>),
}

impl Socket {
    /// A socket whose opening is still to run.
    pub fn opening(opening: Opening) -> Socket {
        Socket::Layered(Box::new(Layered::Opening(Box::new(opening))))
    }

    /// A stream ready for MQTT that is not a plain TCP socket.
    pub fn open(stream: Box<dyn Duplex>) -> Socket {
        Socket::Layered(Box::new(Layered::Open(stream)))
    }

    pub fn in_opening(&self) -> bool {
        matches!(self, Socket::Layered(layered) if matches!(**layered, Layered::Opening(_)))
    }

    /// Runs the opening on; once it is done the socket carries MQTT.
    /// `Ready(None)` when it failed, or when `closing` says its time ran out.
    pub fn poll_opening(&mut self, cx: &mut Context<'_>, closing: bool) -> Poll<Option<Learnt>> {
        let Socket::Layered(layered) = self else {
            return Poll::Ready(None);
        };
        let Layered::Opening(opening) = &mut **layered else {
            return Poll::Ready(None);
        };
        if closing {
            log::info!(
                "{}: {} with {} did not finish in time",
                opening.door,
                opening.stage.get(),
                opening.peer
            );
            return Poll::Ready(None);
        }
        match opening.future.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Opened { stream, learnt })) => {
                **layered = Layered::Open(stream);
                Poll::Ready(Some(learnt))
            }
        }
    }

    fn stream(&mut self) -> Option<&mut dyn Duplex> {
        match self {
            Socket::Plain(stream) => Some(stream),
            Socket::Layered(layered) => match &mut **layered {
                Layered::Open(stream) => Some(&mut **stream),
                Layered::Opening(_) => None,
            },
        }
    }

    pub fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.stream() {
            Some(stream) => Pin::new(stream).poll_read(cx, buf),
            None => Poll::Pending,
        }
    }

    pub fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        match self.stream() {
            Some(stream) => Pin::new(stream).poll_write(cx, bytes),
            None => Poll::Pending,
        }
    }

    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream() {
            Some(stream) => Pin::new(stream).poll_flush(cx),
            None => Poll::Pending,
        }
    }

    /// Has what was read acknowledged at once (see `quick_ack`).
    pub fn acknowledge_now(&mut self) {
        if let Some(stream) = self.stream() {
            stream.acknowledge_now();
        }
    }

    /// Says goodbye as the stream's protocol does (TLS's close_notify, a
    /// WebSocket close), then ends the socket; `Pending` while the
    /// goodbye is being written, unless `late` says its time is up.
    pub fn poll_close(&mut self, cx: &mut Context<'_>, late: bool) -> Poll<()> {
        match self {
            Socket::Plain(stream) => {
                let _ = stream.get_ref().shutdown(Shutdown::Both);
                Poll::Ready(())
            }
            Socket::Layered(layered) => {
                let Layered::Open(stream) = &mut **layered else {
                    return Poll::Ready(());
                };
                if !late && Pin::new(&mut **stream).poll_close(cx).is_pending() {
                    return Poll::Pending;
                }
                stream.shutdown();
                Poll::Ready(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every connection that is not plain TCP holds for its socket,
    /// beside the stream itself, for its whole life.
    const MAX_LAYERED_BYTES: usize = 24;

    #[test]
    fn an_open_layered_socket_holds_no_more_than_its_stream() {
        let size_bytes = std::mem::size_of::<Layered>();
        assert!(
            size_bytes <= MAX_LAYERED_BYTES,
            "a layered socket is {size_bytes} B, over {MAX_LAYERED_BYTES} B"
        );
    }
}
