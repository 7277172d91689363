//! RFC 6455 framing, sans-IO: reading frames in place in the buffer they
//! arrived in, and writing frame headers.
//!
//! A reader takes whatever bytes the socket gave it and leaves at their
//! front the payload of the data frames among them, unmasked, in order,
//! with frame headers and control frames taken out: MQTT needs a byte
//! stream, and a packet may be split across frames in any way. Nothing is
//! copied out but a header split across two reads (at most 14 bytes) and a
//! ping's or a close's payload (at most 125, in a box made only while one
//! is read or owed: an idle connection holds none). A frame that breaks the
//! RFC ends the connection with the close code the RFC gives it.

/// A close status: what the connection is ended with, and why in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub code: u16,
    pub reason: &'static str,
}

/// The close codes this broker sends.
pub const CLOSE_NORMAL: u16 = 1000;
pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
pub const CLOSE_UNSUPPORTED_DATA: u16 = 1003;
/// Sent by nobody: it stands for a close frame that carried no code.
pub const CLOSE_NO_STATUS: u16 = 1005;
pub const CLOSE_INVALID_PAYLOAD: u16 = 1007;
pub const CLOSE_TOO_BIG: u16 = 1009;

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xa;

const FIN: u8 = 0x80;
const RESERVED_BITS: u8 = 0x70;
const MASK_BIT: u8 = 0x80;
/// A control frame's payload, at most (RFC 6455 section 5.5).
pub const MAX_CONTROL_PAYLOAD_BYTES: usize = 125;
/// A ping's or a close's payload, as collected.
pub type ControlPayload = heapless::Vec<u8, MAX_CONTROL_PAYLOAD_BYTES>;
/// The longest frame header: two bytes, eight of length, four of mask.
pub const MAX_HEADER_BYTES: usize = 14;

/// Which end of the connection this is: a server reads masked frames and
/// writes unmasked ones, a client the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// What the frame being read is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Between frames, or inside a header.
    Header,
    /// A data frame's payload, handed on.
    Data,
    /// A control frame's payload: a ping's or a close's collected, a
    /// pong's passed over.
    Control(u8),
}

/// Reads frames, one connection's worth of state.
#[derive(Debug, Clone)]
pub struct Reader {
    role: Role,
    /// A data frame longer than this is refused (1009).
    max_frame_bytes: u64,
    header: [u8; MAX_HEADER_BYTES],
    header_len: u8,
    reading: Reading,
    payload_left: u64,
    mask: Option<[u8; 4]>,
    /// How far into the mask the next payload byte is.
    mask_at: u8,
    /// A message was begun with FIN clear: continuations may follow.
    in_message: bool,
    control: Option<Box<ControlPayload>>,
    /// The payload of the latest ping read whole, owed a pong.
    pong_owed: Option<Box<ControlPayload>>,
    /// The status of a close frame the peer sent; nothing after it is read.
    closed: Option<u16>,
}

impl Reader {
    pub fn new(role: Role, max_frame_bytes: u64) -> Reader {
        Reader {
            role,
            max_frame_bytes,
            header: [0; MAX_HEADER_BYTES],
            header_len: 0,
            reading: Reading::Header,
            payload_left: 0,
            mask: None,
            mask_at: 0,
            in_message: false,
            control: None,
            pong_owed: None,
            closed: None,
        }
    }

    /// Takes the frames in `bytes`, as they arrived, and moves the data
    /// frames' payload, unmasked, to the front of `bytes`: returns how many
    /// bytes of it there are. A ping makes a pong owed ([`Reader::take_pong`]);
    /// a close ends the reading ([`Reader::closed`]) and whatever follows
    /// it is ignored.
    pub fn read(&mut self, bytes: &mut [u8]) -> Result<usize, Failure> {
        let mut at = 0;
        let mut data = 0;
        while at < bytes.len() && self.closed.is_none() {
            match self.reading {
                Reading::Header => at += self.take_header(&bytes[at..])?,
                Reading::Data => {
                    let n = self.payload_in(bytes.len() - at);
                    self.unmask(&mut bytes[at..at + n]);
                    bytes.copy_within(at..at + n, data);
                    data += n;
                    at += n;
                    self.payload_taken(n)?;
                }
                Reading::Control(opcode) => {
                    let n = self.payload_in(bytes.len() - at);
                    if opcode != OP_PONG {
                        self.unmask(&mut bytes[at..at + n]);
                        // The header check bounds a control payload to fit.
                        let collected = self.control.get_or_insert_with(Box::default);
                        let _ = collected.extend_from_slice(&bytes[at..at + n]);
                    }
                    at += n;
                    self.payload_taken(n)?;
                }
            }
        }
        Ok(data)
    }

    /// The payload of the latest ping, which a pong must carry back.
    pub fn take_pong(&mut self) -> Option<Box<ControlPayload>> {
        self.pong_owed.take()
    }

    /// The status of the close frame the peer sent, once one has come.
    pub fn closed(&self) -> Option<u16> {
        self.closed
    }

    /// Whether a frame has been begun and not finished: the peer's stream
    /// ended inside it.
    pub fn mid_frame(&self) -> bool {
        self.header_len > 0 || self.reading != Reading::Header
    }

    fn payload_in(&self, available: usize) -> usize {
        usize::try_from(self.payload_left).map_or(available, |left| left.min(available))
    }

    fn unmask(&mut self, payload: &mut [u8]) {
        let Some(mask) = self.mask else { return };
        let mut at = usize::from(self.mask_at);
        for byte in payload.iter_mut() {
            *byte ^= mask[at & 3];
            at += 1;
        }
        self.mask_at = (at & 3) as u8;
    }

    /// Takes header bytes from `bytes` until the header is whole or the
    /// bytes run out; returns how many it took.
    fn take_header(&mut self, bytes: &[u8]) -> Result<usize, Failure> {
        let mut taken = 0;
        loop {
            let needed = self.header_needed();
            let have = usize::from(self.header_len);
            if have == needed {
                break;
            }
            let Some(&byte) = bytes.get(taken) else {
                return Ok(taken);
            };
            self.header[have] = byte;
            self.header_len += 1;
            taken += 1;
            if self.header_len == 2 {
                self.check_first_two()?;
            }
        }
        self.begin_frame()?;
        Ok(taken)
    }

    /// How long the header under way is, as far as its bytes so far say.
    fn header_needed(&self) -> usize {
        if self.header_len < 2 {
            return 2;
        }
        let length = match self.header[1] & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.header[1] & MASK_BIT != 0 { 4 } else { 0 };
        2 + length + mask
    }

    /// What the first two bytes alone decide.
    fn check_first_two(&self) -> Result<(), Failure> {
        let (first, second) = (self.header[0], self.header[1]);
        let opcode = first & 0x0f;
        if first & RESERVED_BITS != 0 {
            return Err(protocol_error(
                "a frame with reserved bits set, and no extension was agreed",
            ));
        }
        let masked = second & MASK_BIT != 0;
        match (self.role, masked) {
            (Role::Server, false) => {
                return Err(protocol_error("a client frame that is not masked"))
            }
            (Role::Client, true) => return Err(protocol_error("a server frame that is masked")),
            _ => {}
        }
        match opcode {
            OP_CLOSE | OP_PING | OP_PONG => {
                if first & FIN == 0 {
                    return Err(protocol_error("a fragmented control frame"));
                }
                if usize::from(second & 0x7f) > MAX_CONTROL_PAYLOAD_BYTES {
                    return Err(protocol_error("a control frame longer than 125 bytes"));
                }
            }
            OP_BINARY if self.in_message => {
                return Err(protocol_error(
                    "a new message began before the fragmented one before it ended",
                ))
            }
            OP_CONTINUATION if !self.in_message => {
                return Err(protocol_error(
                    "a continuation frame with no message to continue",
                ))
            }
            OP_BINARY | OP_CONTINUATION => {}
            OP_TEXT => {
                return Err(Failure {
                    code: CLOSE_UNSUPPORTED_DATA,
                    reason: "MQTT travels in binary frames, not text",
                })
            }
            _ => return Err(protocol_error("a frame of an opcode RFC 6455 reserves")),
        }
        Ok(())
    }

    /// The header is whole: the frame's length, mask and kind.
    fn begin_frame(&mut self) -> Result<(), Failure> {
        let header = &self.header[..usize::from(self.header_len)];
        let (length, rest) = match header[1] & 0x7f {
            126 => (u64::from(u16::from_be_bytes([header[2], header[3]])), 4),
            127 => {
                let mut eight = [0u8; 8];
                eight.copy_from_slice(&header[2..10]);
                (u64::from_be_bytes(eight), 10)
            }
            short => (u64::from(short), 2),
        };
        if length >> 63 != 0 {
            return Err(protocol_error("a frame length with its top bit set"));
        }
        let opcode = header[0] & 0x0f;
        let control = opcode >= OP_CLOSE;
        if !control && length > self.max_frame_bytes {
            return Err(Failure {
                code: CLOSE_TOO_BIG,
                reason: "a frame larger than the maximum packet size",
            });
        }
        self.mask = (header[1] & MASK_BIT != 0).then(|| {
            let mut mask = [0u8; 4];
            mask.copy_from_slice(&header[rest..rest + 4]);
            mask
        });
        self.mask_at = 0;
        self.payload_left = length;
        self.header_len = 0;
        if control {
            if let Some(collected) = &mut self.control {
                collected.clear();
            }
            self.reading = Reading::Control(opcode);
        } else {
            self.in_message = header[0] & FIN == 0;
            self.reading = Reading::Data;
        }
        if length == 0 {
            self.frame_done()?;
        }
        Ok(())
    }

    fn payload_taken(&mut self, n: usize) -> Result<(), Failure> {
        self.payload_left -= n as u64;
        if self.payload_left == 0 {
            self.frame_done()?;
        }
        Ok(())
    }

    fn frame_done(&mut self) -> Result<(), Failure> {
        let reading = std::mem::replace(&mut self.reading, Reading::Header);
        match reading {
            // A ping read whole takes the place of one still owed.
            Reading::Control(OP_PING) => {
                self.pong_owed = Some(self.control.take().unwrap_or_default())
            }
            Reading::Control(OP_CLOSE) => {
                let payload = self.control.take().unwrap_or_default();
                self.closed = Some(close_status(&payload)?);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Reads from a blocking `source` into `buf` until its frames carry data,
/// taking `early` (framed bytes read before, such as those behind an
/// upgrade's answer) first: how many bytes of data, or 0 once the stream
/// or a close has ended it. For blocking clients (the tests' and the
/// benchmark's); the broker's own reading is `stream.rs`. A pong owed is
/// left for [`Reader::take_pong`].
pub fn read_blocking(
    reader: &mut Reader,
    early: &mut Vec<u8>,
    source: &mut impl std::io::Read,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    loop {
        if reader.closed().is_some() {
            return Ok(0);
        }
        let n = if early.is_empty() {
            source.read(buf)?
        } else {
            let n = early.len().min(buf.len());
            buf[..n].copy_from_slice(&early[..n]);
            early.drain(..n);
            n
        };
        if n == 0 {
            return Ok(0);
        }
        let data = reader.read(&mut buf[..n]).map_err(|failure| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, failure.reason)
        })?;
        if data > 0 {
            return Ok(data);
        }
    }
}

fn protocol_error(reason: &'static str) -> Failure {
    Failure {
        code: CLOSE_PROTOCOL_ERROR,
        reason,
    }
}

/// The status a close frame's payload carries, checked as RFC 6455
/// section 7.4 asks: a code a peer may send, and a reason in UTF-8.
fn close_status(payload: &[u8]) -> Result<u16, Failure> {
    match payload {
        [] => Ok(CLOSE_NO_STATUS),
        [_] => Err(protocol_error("a close frame of one byte")),
        [high, low, reason @ ..] => {
            let code = u16::from_be_bytes([*high, *low]);
            let sendable = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
            if !sendable {
                return Err(protocol_error("a close frame with a code no peer may send"));
            }
            if std::str::from_utf8(reason).is_err() {
                return Err(Failure {
                    code: CLOSE_INVALID_PAYLOAD,
                    reason: "a close reason that is not UTF-8",
                });
            }
            Ok(code)
        }
    }
}

/// A frame header: one binary frame of `length` bytes, whole (FIN set),
/// masked with `mask` when a client writes it. Returns the header's bytes
/// and how many of them there are.
pub fn binary_header(length: u64, mask: Option<[u8; 4]>) -> ([u8; MAX_HEADER_BYTES], usize) {
    header(FIN | OP_BINARY, length, mask)
}

fn header(first: u8, length: u64, mask: Option<[u8; 4]>) -> ([u8; MAX_HEADER_BYTES], usize) {
    let mut out = [0u8; MAX_HEADER_BYTES];
    out[0] = first;
    let mask_bit = if mask.is_some() { MASK_BIT } else { 0 };
    let mut len = match length {
        0..=125 => {
            out[1] = mask_bit | length as u8;
            2
        }
        126..=0xffff => {
            out[1] = mask_bit | 126;
            out[2..4].copy_from_slice(&(length as u16).to_be_bytes());
            4
        }
        _ => {
            out[1] = mask_bit | 127;
            out[2..10].copy_from_slice(&length.to_be_bytes());
            10
        }
    };
    if let Some(mask) = mask {
        out[len..len + 4].copy_from_slice(&mask);
        len += 4;
    }
    (out, len)
}

/// A whole control frame: a pong carrying `payload`, or a close carrying
/// `code` (and no reason), masked with `mask` when a client writes it.
pub type ControlFrame = heapless::Vec<u8, { MAX_HEADER_BYTES + MAX_CONTROL_PAYLOAD_BYTES }>;

pub fn pong(payload: &[u8], mask: Option<[u8; 4]>) -> ControlFrame {
    control(FIN | OP_PONG, payload, mask)
}

pub fn close(code: u16, mask: Option<[u8; 4]>) -> ControlFrame {
    // 1005 stands for "no code": the answer to a close without one is a
    // close without one.
    let payload = code.to_be_bytes();
    let payload: &[u8] = if code == CLOSE_NO_STATUS {
        &[]
    } else {
        &payload
    };
    control(FIN | OP_CLOSE, payload, mask)
}

fn control(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> ControlFrame {
    let payload = &payload[..payload.len().min(MAX_CONTROL_PAYLOAD_BYTES)];
    let (head, len) = header(first, payload.len() as u64, mask);
    let mut frame = ControlFrame::new();
    let _ = frame.extend_from_slice(&head[..len]);
    let start = frame.len();
    let _ = frame.extend_from_slice(payload);
    if let Some(mask) = mask {
        for (i, byte) in frame[start..].iter_mut().enumerate() {
            *byte ^= mask[i & 3];
        }
    }
    frame
}

/// Masks (or unmasks) `payload` in place, `offset` bytes into a frame
/// masked with `mask`.
pub fn apply_mask(payload: &mut [u8], mask: [u8; 4], offset: u64) {
    for (i, byte) in payload.iter_mut().enumerate() {
        *byte ^= mask[((offset + i as u64) & 3) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    /// A frame as a client sends it.
    fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
        let (head, len) = header(first, payload.len() as u64, Some(MASK));
        let mut frame = head[..len].to_vec();
        let start = frame.len();
        frame.extend_from_slice(payload);
        apply_mask(&mut frame[start..], MASK, 0);
        frame
    }

    fn server() -> Reader {
        Reader::new(Role::Server, 1 << 20)
    }

    /// Everything `bytes` carries, read in pieces of `cut` bytes.
    fn read_in_pieces(reader: &mut Reader, bytes: &[u8], cut: usize) -> Result<Vec<u8>, Failure> {
        let mut out = Vec::new();
        for piece in bytes.chunks(cut) {
            let mut piece = piece.to_vec();
            let n = reader.read(&mut piece)?;
            out.extend_from_slice(&piece[..n]);
        }
        Ok(out)
    }

    #[test]
    fn payload_split_across_frames_and_reads_in_any_way_comes_out_whole() {
        let packet: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        // One message in three fragments, a ping between two of them, and
        // a second message: lengths of every header form.
        let mut wire = masked(OP_BINARY, &packet[..100]);
        wire.extend(masked(FIN | OP_PING, b"are you there"));
        wire.extend(masked(OP_CONTINUATION, &packet[100..400]));
        wire.extend(masked(FIN | OP_CONTINUATION, &packet[400..69_000]));
        wire.extend(masked(FIN | OP_BINARY, &packet[69_000..]));
        for cut in [1, 2, 3, 7, 13, 14, 125, 4096, wire.len()] {
            let mut reader = server();
            let got = read_in_pieces(&mut reader, &wire, cut).unwrap();
            assert_eq!(got, packet, "read in pieces of {cut}");
            assert_eq!(
                reader.take_pong().as_deref().map(|p| p.as_slice()),
                Some(&b"are you there"[..]),
                "cut {cut}"
            );
            assert!(!reader.mid_frame());
        }
    }

    #[test]
    fn a_ping_read_whole_stays_owed_while_the_next_is_still_arriving() {
        // The fuzz target's find: however the bytes are cut, the first
        // ping's pong is owed until a second ping has come whole.
        let mut wire = masked(FIN | OP_PING, b"first");
        let second = masked(FIN | OP_PING, b"second");
        wire.extend_from_slice(&second[..second.len() - 1]);
        let mut reader = server();
        reader.read(&mut wire).unwrap();
        assert_eq!(
            reader.take_pong().as_deref().map(|p| p.as_slice()),
            Some(&b"first"[..])
        );
        let mut last = second[second.len() - 1..].to_vec();
        reader.read(&mut last).unwrap();
        assert_eq!(
            reader.take_pong().as_deref().map(|p| p.as_slice()),
            Some(&b"second"[..])
        );
    }

    #[test]
    fn a_close_ends_the_reading_and_is_answered_with_its_code() {
        let mut wire = masked(FIN | OP_BINARY, b"abc");
        let mut close_payload = 1001u16.to_be_bytes().to_vec();
        close_payload.extend_from_slice("bye".as_bytes());
        wire.extend(masked(FIN | OP_CLOSE, &close_payload));
        wire.extend(masked(FIN | OP_BINARY, b"ignored"));
        let mut reader = server();
        let n = reader.read(&mut wire).unwrap();
        assert_eq!(&wire[..n], b"abc");
        assert_eq!(reader.closed(), Some(1001));
        let mut empty = masked(FIN | OP_CLOSE, &[]);
        let mut reader = server();
        reader.read(&mut empty).unwrap();
        assert_eq!(reader.closed(), Some(CLOSE_NO_STATUS));
        // Answered without a code, as it came.
        assert_eq!(&close(CLOSE_NO_STATUS, None)[..], &[FIN | OP_CLOSE, 0]);
    }

    #[test]
    fn frames_that_break_the_rfc_get_the_code_it_gives_them() {
        let unmasked = {
            let (head, len) = header(FIN | OP_BINARY, 3, None);
            let mut f = head[..len].to_vec();
            f.extend_from_slice(b"abc");
            f
        };
        let long_ping = masked(FIN | OP_PING, &[0; 126]);
        let cases: Vec<(Vec<u8>, u16, &str)> = vec![
            (unmasked, CLOSE_PROTOCOL_ERROR, "not masked"),
            (
                masked(FIN | OP_TEXT, b"{}"),
                CLOSE_UNSUPPORTED_DATA,
                "binary",
            ),
            (
                masked(FIN | 0x40 | OP_BINARY, b"x"),
                CLOSE_PROTOCOL_ERROR,
                "reserved",
            ),
            (
                masked(OP_PING, b"x"),
                CLOSE_PROTOCOL_ERROR,
                "fragmented control",
            ),
            (long_ping, CLOSE_PROTOCOL_ERROR, "125"),
            (
                masked(FIN | OP_CONTINUATION, b"x"),
                CLOSE_PROTOCOL_ERROR,
                "no message",
            ),
            (masked(FIN | 0x3, b"x"), CLOSE_PROTOCOL_ERROR, "reserves"),
            (
                masked(FIN | OP_CLOSE, &[3]),
                CLOSE_PROTOCOL_ERROR,
                "one byte",
            ),
            (
                masked(FIN | OP_CLOSE, &1006u16.to_be_bytes()),
                CLOSE_PROTOCOL_ERROR,
                "no peer may send",
            ),
            (
                masked(FIN | OP_CLOSE, &[0x03, 0xe8, 0xff]),
                CLOSE_INVALID_PAYLOAD,
                "UTF-8",
            ),
        ];
        for (mut wire, code, said) in cases {
            let failure = server().read(&mut wire).unwrap_err();
            assert_eq!(failure.code, code, "{said}: {failure:?}");
            assert!(failure.reason.contains(said), "{said}: {failure:?}");
        }
        let mut interleaved = masked(OP_BINARY, b"a");
        interleaved.extend(masked(FIN | OP_BINARY, b"b"));
        let failure = server().read(&mut interleaved).unwrap_err();
        assert!(failure.reason.contains("before it ended"), "{failure:?}");
        // Refused on the length its header declares, before any payload.
        let (head, len) = header(FIN | OP_BINARY, 1025, Some(MASK));
        let mut oversized = head[..len].to_vec();
        let failure = Reader::new(Role::Server, 1024)
            .read(&mut oversized)
            .unwrap_err();
        assert_eq!(failure.code, CLOSE_TOO_BIG);
        let mut top_bit = vec![FIN | OP_BINARY, MASK_BIT | 127, 0x80, 0, 0, 0, 0, 0, 0, 0];
        top_bit.extend_from_slice(&MASK);
        let failure = server().read(&mut top_bit).unwrap_err();
        assert!(failure.reason.contains("top bit"), "{failure:?}");
    }

    #[test]
    fn a_client_reads_unmasked_frames_and_refuses_masked_ones() {
        let (head, len) = binary_header(5, None);
        let mut wire = head[..len].to_vec();
        wire.extend_from_slice(b"hello");
        let mut client = Reader::new(Role::Client, 1 << 20);
        let n = client.read(&mut wire).unwrap();
        assert_eq!(&wire[..n], b"hello");
        let mut masked_frame = masked(FIN | OP_BINARY, b"x");
        let failure = Reader::new(Role::Client, 1 << 20)
            .read(&mut masked_frame)
            .unwrap_err();
        assert!(failure.reason.contains("is masked"), "{failure:?}");
    }

    #[test]
    fn headers_take_the_shortest_length_form() {
        assert_eq!(binary_header(125, None).1, 2);
        assert_eq!(binary_header(126, None).1, 4);
        assert_eq!(binary_header(65_535, None).1, 4);
        assert_eq!(binary_header(65_536, None).1, 10);
        assert_eq!(binary_header(0, Some(MASK)).1, 6);
        let frame = pong(b"hi", Some(MASK));
        let mut reader = server();
        let mut bytes = frame.to_vec();
        reader.read(&mut bytes).unwrap();
        assert_eq!(reader.take_pong(), None, "a pong is owed nothing");
    }
}
