//! One HTTP/1.1 request in, one response out, under fixed bounds.
//!
//! The request head is parsed by `httparse` from a buffer of
//! [`MAX_HEAD_BYTES`]; a head that does not fit is answered 431 and the
//! connection closed, so nothing a caller sends grows memory. No route
//! here takes a body, so a request carrying one is refused rather than
//! read, and one whose length could be read two ways (two
//! `Content-Length`s, one beside `Transfer-Encoding`) is refused and the
//! connection closed: a proxy in front reading the other length would
//! take the bytes after it for a request of their own.

use std::time::Duration;

use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The most a request line and its headers may take.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// The most header lines a request may carry.
pub const MAX_HEADERS: usize = 32;
/// How long a connection may take to send a whole request head, and how
/// long an idle keep-alive connection is kept.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Requests served on one connection before it is closed.
pub const MAX_REQUESTS_PER_CONNECTION: u32 = 100;

/// A request head, checked and copied out of the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// What followed `?`, undecoded; empty for none.
    pub query: String,
    /// Header names lowercased, values as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// HTTP/1.1 without `Connection: close`.
    pub keep_alive: bool,
    /// It announced a body, which no route here takes: it is answered
    /// without the body being read, and its connection closed.
    pub announces_body: bool,
}

impl Request {
    /// The first header of that (lowercase) name, if its value is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// Every value of a query parameter, percent-decoded.
    pub fn query_values(&self, name: &str) -> Vec<String> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .filter(|(k, _)| percent_decode(k).as_deref() == Some(name))
            .filter_map(|(_, v)| percent_decode(v))
            .collect()
    }
}

/// `%XX` and `+` decoded; `None` for a malformed escape or text that is
/// not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Why no request could be read. Each but `Closed` is answered before the
/// connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The peer closed, or went quiet past the timeout, between requests.
    Closed,
    /// Not HTTP/1.x, or a head `httparse` refuses.
    Malformed,
    /// Over [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`].
    TooLarge,
    /// More than one `Content-Length`, one that is not digits, or one
    /// beside `Transfer-Encoding`.
    AmbiguousLength,
}

impl ReadError {
    /// The response the caller is owed, if any.
    pub fn response(self) -> Option<Response> {
        match self {
            ReadError::Closed => None,
            ReadError::Malformed => Some(Response::text(400, "malformed request\n")),
            ReadError::TooLarge => Some(Response::text(
                431,
                "the request head is larger than this listener reads\n",
            )),
            ReadError::AmbiguousLength => Some(Response::text(
                400,
                "a request carries at most one Content-Length, written in digits, and none beside Transfer-Encoding; this connection is closed\n",
            )),
        }
    }
}

/// Bytes read past one request, kept for the next on the same connection.
pub struct ReadBuffer {
    bytes: Box<[u8; MAX_HEAD_BYTES]>,
    filled: usize,
}

impl Default for ReadBuffer {
    fn default() -> ReadBuffer {
        ReadBuffer {
            bytes: Box::new([0; MAX_HEAD_BYTES]),
            filled: 0,
        }
    }
}

impl ReadBuffer {
    /// Reads one request head, waiting at most [`REQUEST_TIMEOUT_MS`].
    pub async fn read_request(
        &mut self,
        stream: &mut (impl AsyncRead + Unpin),
    ) -> Result<Request, ReadError> {
        let deadline = smol::Timer::after(Duration::from_millis(REQUEST_TIMEOUT_MS));
        smol::future::or(self.read_head(stream), async {
            deadline.await;
            Err(ReadError::Closed)
        })
        .await
    }

    async fn read_head(
        &mut self,
        stream: &mut (impl AsyncRead + Unpin),
    ) -> Result<Request, ReadError> {
        loop {
            if self.filled > 0 {
                if let Some((request, used)) = parse(&self.bytes[..self.filled])? {
                    self.bytes.copy_within(used..self.filled, 0);
                    self.filled -= used;
                    return Ok(request);
                }
            }
            if self.filled == MAX_HEAD_BYTES {
                return Err(ReadError::TooLarge);
            }
            let n = stream
                .read(&mut self.bytes[self.filled..])
                .await
                .map_err(|_| ReadError::Closed)?;
            if n == 0 {
                return Err(if self.filled == 0 {
                    ReadError::Closed
                } else {
                    ReadError::Malformed
                });
            }
            self.filled += n;
        }
    }
}

/// A complete head and the bytes it took, `None` for a partial one.
fn parse(bytes: &[u8]) -> Result<Option<(Request, usize)>, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let used = match head.parse(bytes) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ReadError::TooLarge),
        Err(_) => return Err(ReadError::Malformed),
    };
    let (Some(method), Some(target), Some(version)) = (head.method, head.path, head.version) else {
        return Err(ReadError::Malformed);
    };
    let headers: Vec<(String, Vec<u8>)> = head
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
    };
    let announces_body = body_length(&headers)?;
    let connection = value("connection").unwrap_or_default();
    let keep_alive = version == 1 && !connection.split(',').any(|t| t.trim() == "close");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if !path.starts_with('/') {
        return Err(ReadError::Malformed);
    }
    let request = Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        keep_alive: keep_alive && !announces_body,
        announces_body,
    };
    Ok(Some((request, used)))
}

/// Whether a request announces a body; refuses one whose length two
/// readers could read differently.
fn body_length(headers: &[(String, Vec<u8>)]) -> Result<bool, ReadError> {
    let mut lengths = headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.trim_ascii());
    let chunked = headers.iter().any(|(n, _)| n == "transfer-encoding");
    match (lengths.next(), lengths.next(), chunked) {
        (None, _, false) => Ok(false),
        (None, _, true) => Ok(true),
        (Some(_), Some(_), _) | (Some(_), None, true) => Err(ReadError::AmbiguousLength),
        (Some(length), None, false) => {
            if length.is_empty() || !length.iter().all(u8::is_ascii_digit) {
                Err(ReadError::AmbiguousLength)
            } else {
                Ok(!length.iter().all(|&b| b == b'0'))
            }
        }
    }
}

/// A response, written whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Headers beyond the content type and length, such as `Allow`.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    pub fn bytes(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body,
        }
    }

    pub fn json(status: u16, body: String) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: body.into_bytes(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The bytes on the wire; a `HEAD` is told the length and sent no body.
    pub fn encode(&self, head_only: bool, keep_alive: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str(if keep_alive {
            "Connection: keep-alive\r\n\r\n"
        } else {
            "Connection: close\r\n\r\n"
        });
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

/// How long a connection answered for the last time is given to close its
/// side, and the most of what it sent that is read and thrown away
/// meanwhile.
const LINGER_MS: u64 = 1_000;
const LINGER_BYTES: usize = 64 * 1024;

/// After a last answer and a close of the writing half: reads and throws
/// away what the caller sent and nobody read, for a moment, so the close
/// does not reset the answer away before the caller has it. The
/// operations listener's refusals and a WebSocket door's do it alike.
pub async fn linger<S: AsyncRead + Unpin>(stream: &mut S) {
    let drain = async {
        let mut scratch = [0u8; 1024];
        let mut drained = 0;
        while drained < LINGER_BYTES {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let deadline = async {
        smol::Timer::after(Duration::from_millis(LINGER_MS)).await;
    };
    smol::future::or(drain, deadline).await;
}

/// Writes `response`, bounded by [`REQUEST_TIMEOUT_MS`]; false when the
/// peer did not take it in time.
pub async fn write_response(
    stream: &mut (impl AsyncWrite + Unpin),
    response: &Response,
    head_only: bool,
    keep_alive: bool,
) -> bool {
    let bytes = response.encode(head_only, keep_alive);
    let write = async { stream.write_all(&bytes).await.is_ok() && stream.flush().await.is_ok() };
    smol::future::or(write, async {
        smol::Timer::after(Duration::from_millis(REQUEST_TIMEOUT_MS)).await;
        false
    })
    .await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Option<(Request, usize)>, ReadError> {
        parse(text.as_bytes())
    }

    #[test]
    fn a_head_is_read_with_its_query_and_lowercased_headers() {
        let (request, used) = parsed("GET /v1/x?a=1&b=%2F HTTP/1.1\r\nHost: h\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert_eq!(
            used,
            "GET /v1/x?a=1&b=%2F HTTP/1.1\r\nHost: h\r\n\r\n".len()
        );
        assert_eq!(request.path, "/v1/x");
        assert_eq!(request.query_values("b"), vec!["/".to_string()]);
        assert_eq!(request.header("host"), Some("h"));
        assert!(request.keep_alive);
    }

    #[test]
    fn partial_heads_wait_and_bad_ones_are_refused() {
        assert_eq!(parsed("GET /health HTTP/1.1\r\nHo"), Ok(None));
        assert_eq!(parsed("GARBAGE\r\n\r\n"), Err(ReadError::Malformed));
        assert_eq!(
            parsed("GET health HTTP/1.1\r\n\r\n"),
            Err(ReadError::Malformed)
        );
        let announced = |text: &str| {
            let (request, _) = parsed(text).unwrap().unwrap();
            (request.announces_body, request.keep_alive)
        };
        let body = "POST /health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(announced(body), (true, false), "answered, then closed");
        let chunked = "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(announced(chunked), (true, false));
        let zero = "GET / HTTP/1.1\r\nContent-Length: 00\r\n\r\n";
        assert_eq!(announced(zero), (false, true));
        for ambiguous in [
            "Content-Length: 0\r\nContent-Length: 5",
            "Content-Length: 0\r\ncontent-length: 0",
            "Content-Length: 0, 5",
            "Content-Length: +0",
            "Content-Length: 0x0",
            "Content-Length:",
            "Transfer-Encoding: chunked\r\nContent-Length: 0",
            "Content-Length: 5\r\nTransfer-Encoding: identity",
        ] {
            let head = format!("GET / HTTP/1.1\r\n{ambiguous}\r\n\r\n");
            assert_eq!(
                parsed(&head),
                Err(ReadError::AmbiguousLength),
                "{ambiguous}"
            );
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x{i}: y\r\n")).collect();
        assert_eq!(
            parsed(&format!("GET / HTTP/1.1\r\n{many}\r\n")),
            Err(ReadError::TooLarge)
        );
    }

    #[test]
    fn close_and_http_1_0_end_the_connection() {
        let close = parsed("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!close.0.keep_alive);
        let old = parsed("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!old.0.keep_alive);
    }

    #[test]
    fn a_head_response_carries_the_length_and_no_body() {
        let response = Response::text(200, "hello");
        let head = String::from_utf8(response.encode(true, false)).unwrap();
        assert!(head.contains("Content-Length: 5\r\n"));
        assert!(head.ends_with("\r\n\r\n"));
        let get = String::from_utf8(response.encode(false, true)).unwrap();
        assert!(get.ends_with("\r\n\r\nhello"));
        assert!(get.contains("Connection: keep-alive"));
    }

    #[test]
    fn percent_decoding_refuses_broken_escapes() {
        assert_eq!(percent_decode("a%20b+c").as_deref(), Some("a b c"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%ff"), None);
    }
}
