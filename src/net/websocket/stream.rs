//! MQTT's byte stream over WebSocket frames: what is read is the data
//! frames' payload, read in place ([`super::frame::Reader`]); what is
//! written goes out as binary frames, each header announcing bytes of the
//! caller's that then pass through as they are (a server's) or masked (a
//! client's). A ping is answered with a pong and a close with a close, each
//! written at the next frame boundary; a frame that breaks the RFC is
//! answered with a close carrying its code and ends the stream with an
//! error.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use smol::io::{AsyncRead, AsyncWrite};

use super::frame::{self, ControlFrame, Reader, Role, MAX_HEADER_BYTES};

/// A client's frames are masked through a buffer of this size on the
/// stack, so one frame is at most this long.
const MAX_CLIENT_FRAME_BYTES: usize = 16 * 1024;

/// What one connection's framing holds: a [`WsStream`] as a door serves
/// it, over the boxed stream beneath (whose own size is not counted).
pub const STATE_BYTES: usize = std::mem::size_of::<WsStream<Box<dyn crate::net::socket::Duplex>>>();

/// A WebSocket connection after its upgrade, carrying a byte stream.
pub struct WsStream<S> {
    inner: S,
    role: Role,
    reader: Reader,
    /// Framed bytes that came with the upgrade's head, not read yet.
    early: Vec<u8>,
    /// The header of the frame being written, and how much of it is out.
    header: [u8; MAX_HEADER_BYTES],
    header_len: u8,
    header_at: u8,
    /// Payload the header announced that is not written yet.
    frame_left: u64,
    /// A client's mask for the frame being written, and how far into it.
    mask: Option<[u8; 4]>,
    frame_at: u64,
    /// A pong or a close, written at the next frame boundary, and how much
    /// of it is out; boxed while it waits, so an idle connection holds none.
    control: Option<Box<ControlFrame>>,
    /// A control frame is at most 139 bytes, so a byte counts it.
    control_at: u8,
    /// A close has been queued: no frame is begun after it.
    closing: bool,
    /// A close waiting for the control frame before it to go out.
    close_waiting: Option<u16>,
}

impl<S> WsStream<S> {
    /// The server end of a connection whose upgrade is answered; `early`
    /// is what the client sent after its request head. A data frame
    /// longer than `max_frame_bytes` is refused (close 1009).
    pub fn server(inner: S, early: Vec<u8>, max_frame_bytes: u64) -> WsStream<S> {
        WsStream::new(inner, Role::Server, early, max_frame_bytes)
    }

    /// The client end, over a connection whose upgrade the server answered.
    pub fn client(inner: S, early: Vec<u8>, max_frame_bytes: u64) -> WsStream<S> {
        WsStream::new(inner, Role::Client, early, max_frame_bytes)
    }

    fn new(inner: S, role: Role, early: Vec<u8>, max_frame_bytes: u64) -> WsStream<S> {
        WsStream {
            inner,
            role,
            reader: Reader::new(role, max_frame_bytes),
            early,
            header: [0; MAX_HEADER_BYTES],
            header_len: 0,
            header_at: 0,
            frame_left: 0,
            mask: None,
            frame_at: 0,
            control: None,
            control_at: 0,
            closing: false,
            close_waiting: None,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Between frames: nothing of a data frame is owed to the wire.
    fn at_boundary(&self) -> bool {
        self.frame_left == 0 && self.header_at == self.header_len
    }

    fn control_idle(&self) -> bool {
        self.control.is_none()
    }

    fn mask(&self) -> Option<[u8; 4]> {
        (self.role == Role::Client).then(random_mask)
    }

    fn queue_pong(&mut self, payload: &[u8]) {
        // A pong answers the latest ping; one already on its way will do.
        if !self.closing && self.control_idle() {
            self.control = Some(Box::new(frame::pong(payload, self.mask())));
            self.control_at = 0;
        }
    }

    fn queue_close(&mut self, code: u16) {
        if self.closing {
            return;
        }
        self.closing = true;
        if self.control_idle() {
            self.control = Some(Box::new(frame::close(code, self.mask())));
            self.control_at = 0;
        } else {
            self.close_waiting = Some(code);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WsStream<S> {
    /// Writes the queued control frames, once between data frames.
    fn poll_control(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.at_boundary() {
            if self.control_idle() {
                let Some(code) = self.close_waiting.take() else {
                    break;
                };
                self.control = Some(Box::new(frame::close(code, self.mask())));
                self.control_at = 0;
            }
            let Some(control) = &self.control else {
                break;
            };
            let rest = &control[usize::from(self.control_at)..];
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.control_at += n as u8;
            if usize::from(self.control_at) == control.len() {
                self.control = None;
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Puts what is queued on the wire if the socket takes it now.
    fn send_control_now(&mut self, cx: &mut Context<'_>) {
        if let Poll::Ready(Ok(())) = self.poll_control(cx) {
            let _ = Pin::new(&mut self.inner).poll_flush(cx);
        }
    }

    /// Reads framed bytes into `buf`, from what came with the upgrade first.
    fn poll_read_framed(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if self.early.is_empty() {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let n = self.early.len().min(buf.len());
        buf[..n].copy_from_slice(&self.early[..n]);
        self.early.drain(..n);
        if self.early.is_empty() {
            self.early = Vec::new();
        }
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            if this.reader.closed().is_some() {
                this.send_control_now(cx);
                return Poll::Ready(Ok(0));
            }
            let n = ready!(this.poll_read_framed(cx, buf))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
            match this.reader.read(&mut buf[..n]) {
                Err(failure) => {
                    this.queue_close(failure.code);
                    this.send_control_now(cx);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("WebSocket close {}: {}", failure.code, failure.reason),
                    )));
                }
                Ok(data) => {
                    if let Some(payload) = this.reader.take_pong() {
                        this.queue_pong(&payload);
                        this.send_control_now(cx);
                    }
                    if let Some(code) = this.reader.closed() {
                        this.queue_close(code);
                        this.send_control_now(cx);
                    }
                    if data > 0 {
                        return Poll::Ready(Ok(data));
                    }
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if bytes.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            if this.header_at < this.header_len {
                let head = &this.header[usize::from(this.header_at)..usize::from(this.header_len)];
                // A server's payload goes out with its header in one write.
                let payload = match this.role {
                    Role::Server => &bytes[..left_in(this.frame_left, bytes.len())],
                    Role::Client => &[][..],
                };
                let slices = [IoSlice::new(head), IoSlice::new(payload)];
                let n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, &slices))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                let of_head = n.min(head.len());
                this.header_at += of_head as u8;
                let of_payload = n - of_head;
                if of_payload > 0 {
                    this.frame_left -= of_payload as u64;
                    return Poll::Ready(Ok(of_payload));
                }
                continue;
            }
            if this.frame_left > 0 {
                let n = left_in(this.frame_left, bytes.len());
                let written = match this.mask {
                    None => ready!(Pin::new(&mut this.inner).poll_write(cx, &bytes[..n]))?,
                    Some(mask) => {
                        let mut masked = [0u8; MAX_CLIENT_FRAME_BYTES];
                        let n = n.min(MAX_CLIENT_FRAME_BYTES);
                        masked[..n].copy_from_slice(&bytes[..n]);
                        frame::apply_mask(&mut masked[..n], mask, this.frame_at);
                        ready!(Pin::new(&mut this.inner).poll_write(cx, &masked[..n]))?
                    }
                };
                if written == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                this.frame_left -= written as u64;
                this.frame_at += written as u64;
                return Poll::Ready(Ok(written));
            }
            if this.closing {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            ready!(this.poll_control(cx))?;
            let length = match this.role {
                Role::Server => bytes.len(),
                Role::Client => bytes.len().min(MAX_CLIENT_FRAME_BYTES),
            };
            this.mask = this.mask();
            let (header, header_len) = frame::binary_header(length as u64, this.mask);
            this.header = header;
            this.header_len = header_len as u8;
            this.header_at = 0;
            this.frame_left = length as u64;
            this.frame_at = 0;
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_control(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    /// Says goodbye with a close (1000) when between frames, then closes
    /// the socket's writing half.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.queue_close(frame::CLOSE_NORMAL);
        ready!(this.poll_control(cx))?;
        Pin::new(&mut this.inner).poll_close(cx)
    }
}

/// How many of `available` bytes the frame under way still takes.
fn left_in(frame_left: u64, available: usize) -> usize {
    usize::try_from(frame_left).map_or(available, |left| left.min(available))
}

/// A mask no peer can predict, as RFC 6455 section 5.3 asks of a client.
fn random_mask() -> [u8; 4] {
    use ring::rand::SecureRandom;
    let mut mask = [0u8; 4];
    // The system's generator does not fail on Linux once booted; a zero
    // mask is still a valid frame.
    let _ = ring::rand::SystemRandom::new().fill(&mut mask);
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use smol::io::{AsyncReadExt, AsyncWriteExt};

    /// Two ends of a socket pair, as smol sockets.
    fn pair() -> (
        smol::Async<std::os::unix::net::UnixStream>,
        smol::Async<std::os::unix::net::UnixStream>,
    ) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (smol::Async::new(a).unwrap(), smol::Async::new(b).unwrap())
    }

    #[test]
    fn a_client_and_a_server_carry_bytes_both_ways_in_any_size() {
        smol::block_on(async {
            let (a, b) = pair();
            let mut client = WsStream::client(a, Vec::new(), 1 << 20);
            let mut server = WsStream::server(b, Vec::new(), 1 << 20);
            let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
            let writer = async {
                client.write_all(&big).await.unwrap();
                client.flush().await.unwrap();
                client
            };
            let reader = async {
                let mut got = vec![0u8; big.len()];
                server.read_exact(&mut got).await.unwrap();
                (server, got)
            };
            let (mut client, (mut server, got)) = smol::future::zip(writer, reader).await;
            assert_eq!(got, big);
            server.write_all(b"back").await.unwrap();
            server.flush().await.unwrap();
            let mut back = [0u8; 4];
            client.read_exact(&mut back).await.unwrap();
            assert_eq!(&back, b"back");
            // A close is answered with a close, and both ends then read the end.
            client.close().await.unwrap();
            let mut rest = Vec::new();
            assert_eq!(server.read_to_end(&mut rest).await.unwrap(), 0);
            assert_eq!(client.read(&mut [0u8; 8]).await.unwrap(), 0);
        });
    }

    #[test]
    fn a_ping_is_answered_with_its_payload_and_a_broken_frame_with_its_code() {
        smol::block_on(async {
            let (mut raw, b) = pair();
            let mut server = WsStream::server(b, Vec::new(), 1 << 20);
            let mask = [1, 2, 3, 4];
            // A ping, then one byte of data so the read returns.
            let mut ping = frame::pong(b"hello", Some(mask)).to_vec();
            ping[0] = 0x89;
            raw.write_all(&ping).await.unwrap();
            let (head, len) = frame::binary_header(1, Some(mask));
            let mut data = head[..len].to_vec();
            data.push(b'x' ^ mask[0]);
            raw.write_all(&data).await.unwrap();
            let mut one = [0u8; 16];
            assert_eq!(server.read(&mut one).await.unwrap(), 1);
            assert_eq!(one[0], b'x');
            let mut pong = [0u8; 7];
            raw.read_exact(&mut pong).await.unwrap();
            assert_eq!(&pong, b"\x8a\x05hello");
            // Unmasked: refused with 1002, said in a close.
            raw.write_all(&[0x82, 0x01, b'y']).await.unwrap();
            let error = server.read(&mut one).await.unwrap_err();
            assert!(error.to_string().contains("1002"), "{error}");
            let mut close = [0u8; 4];
            raw.read_exact(&mut close).await.unwrap();
            assert_eq!(close, [0x88, 0x02, 0x03, 0xea]);
        });
    }

    /// Every idle WebSocket connection holds this: a control frame's
    /// payload, in or out, is boxed only while it lasts.
    const MAX_STATE_BYTES: usize = 160;

    #[test]
    fn the_framing_state_stays_small() {
        let size_bytes = std::mem::size_of::<WsStream<Box<dyn crate::net::socket::Duplex>>>();
        assert_eq!(size_bytes, STATE_BYTES);
        assert!(
            size_bytes <= MAX_STATE_BYTES,
            "a WebSocket connection's framing is {size_bytes} B, over {MAX_STATE_BYTES} B"
        );
    }

    #[test]
    fn bytes_sent_with_the_upgrade_are_read_first() {
        smol::block_on(async {
            let (_raw, b) = pair();
            let mask = [9, 8, 7, 6];
            let (head, len) = frame::binary_header(3, Some(mask));
            let mut early = head[..len].to_vec();
            let start = early.len();
            early.extend_from_slice(b"abc");
            frame::apply_mask(&mut early[start..], mask, 0);
            let mut server = WsStream::server(b, early, 1 << 20);
            let mut got = [0u8; 3];
            server.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"abc");
        });
    }
}
