//! The HTTP/1.1 upgrade that opens a WebSocket, sans-IO: a server's
//! answer to a request head, and a client's request and its check of the
//! answer. Heads are parsed by `httparse`, bounded in size and in headers.

use base64ct::{Base64, Encoding};

use super::Origins;

/// A request or response head longer than this is refused: an upgrade
/// carries a dozen short headers.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Headers one head may carry.
const MAX_HEADERS: usize = 32;
/// RFC 6455 section 1.3: appended to the key before it is hashed.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The subprotocols MQTT over WebSocket is spoken by: `mqtt` (MQTT 3.1.1
/// and 5) and `mqttv3.1`, which older clients offer.
const SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];

/// What a server answers a request head with.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The head is not whole yet; read more.
    Incomplete,
    /// `101 Switching Protocols`: `response` is to be written, then frames
    /// follow. The head took the request's first `head_bytes` bytes.
    Upgrade {
        response: Vec<u8>,
        head_bytes: usize,
    },
    /// Refused before the upgrade: `response` is the HTTP answer, and
    /// `why` says so in the log. `origin` is the refused page's origin,
    /// for a 403.
    Refuse {
        status: u16,
        response: Vec<u8>,
        why: String,
        origin: Option<String>,
    },
}

/// Answers the request head at the front of `request`, for a door that
/// admits pages by `origins` and serves TLS when `tls` is set.
pub fn answer(request: &[u8], origins: &Origins, tls: bool) -> Answer {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_bytes = match parsed.parse(request) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if request.len() < MAX_HEAD_BYTES => {
            return Answer::Incomplete
        }
        Ok(httparse::Status::Partial) => {
            return refuse(
                431,
                format!("a request head longer than {MAX_HEAD_BYTES} bytes"),
                "",
            )
        }
        Err(httparse::Error::TooManyHeaders) => {
            return refuse(
                431,
                format!("a request with more than {MAX_HEADERS} headers"),
                "",
            )
        }
        Err(error) => return refuse(400, format!("a request that is not HTTP: {error}"), ""),
    };
    let header = |name: &str| header_value(parsed.headers, name);
    if parsed.method != Some("GET") {
        return refuse(405, "an upgrade is a GET request".into(), "Allow: GET\r\n");
    }
    if parsed.version != Some(1) {
        return refuse(505, "the door speaks HTTP/1.1 only".into(), "");
    }
    if !has_token(header("upgrade"), "websocket") {
        return refuse(
            426,
            "this port speaks MQTT over WebSocket; the request asked for no upgrade to websocket"
                .into(),
            "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n",
        );
    }
    if !has_token(header("connection"), "upgrade") {
        return refuse(
            400,
            "an upgrade request whose Connection header does not name upgrade".into(),
            "",
        );
    }
    if header("sec-websocket-version").map(str::trim) != Some("13") {
        return refuse(
            426,
            "a WebSocket version other than 13".into(),
            "Sec-WebSocket-Version: 13\r\n",
        );
    }
    let Some(key) = header("sec-websocket-key").map(str::trim) else {
        return refuse(
            400,
            "an upgrade request with no Sec-WebSocket-Key".into(),
            "",
        );
    };
    let mut decoded = [0u8; 18];
    if !matches!(Base64::decode(key, &mut decoded), Ok(bytes) if bytes.len() == 16) {
        return refuse(
            400,
            "a Sec-WebSocket-Key that is not 16 bytes in base64".into(),
            "",
        );
    }
    let declares_body = header("transfer-encoding").is_some()
        || header("content-length").is_some_and(|n| n.trim() != "0");
    if declares_body {
        return refuse(400, "an upgrade request that declares a body".into(), "");
    }
    let Some(host) = header("host") else {
        return refuse(400, "a request with no Host header".into(), "");
    };
    let origin = header("origin");
    if let Err(why) = origins.admits(origin, host, tls) {
        return Answer::Refuse {
            status: 403,
            response: response(403, &format!("{why}\n"), ""),
            why,
            origin: origin.map(str::to_string),
        };
    }
    let offered: Vec<&str> = parsed
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-protocol"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let protocol = SUBPROTOCOLS
        .iter()
        .find(|p| offered.iter().any(|o| o.eq_ignore_ascii_case(p)));
    if !offered.is_empty() && protocol.is_none() {
        return refuse(
            400,
            format!(
                "the request offers the subprotocols {offered:?} and not mqtt, which MQTT over WebSocket is spoken by"
            ),
            "",
        );
    }
    let protocol_line =
        protocol.map_or_else(String::new, |p| format!("Sec-WebSocket-Protocol: {p}\r\n"));
    let upgrade = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{protocol_line}\r\n",
        accept_key(key)
    );
    Answer::Upgrade {
        response: upgrade.into_bytes(),
        head_bytes,
    }
}

/// The first header named `name`, in any case, when it is UTF-8.
fn header_value<'a>(headers: &[httparse::Header<'a>], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
}

/// Whether a comma-separated header holds `token`, in any case.
fn has_token(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

fn refuse(status: u16, why: String, extra_headers: &str) -> Answer {
    Answer::Refuse {
        status,
        response: response(status, &format!("{why}\n"), extra_headers),
        why,
        origin: None,
    }
}

/// A whole HTTP/1.1 answer that closes the connection.
fn response(status: u16, body: &str, extra_headers: &str) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `Sec-WebSocket-Accept` for `key`: SHA-1 of the key and the RFC's GUID,
/// in base64. SHA-1 here is the protocol's checksum, not a security
/// measure, and it is ring's, which TLS already brings.
pub fn accept_key(key: &str) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    context.update(key.as_bytes());
    context.update(ACCEPT_GUID);
    Base64::encode_string(context.finish().as_ref())
}

/// A client's upgrade request for `path` at `host` (with its port), and
/// the key its answer must accept.
pub fn request(host: &str, path: &str, key_bytes: [u8; 16]) -> (Vec<u8>, String) {
    let key = Base64::encode_string(&key_bytes);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
    );
    (request.into_bytes(), key)
}

/// A client's check of the answer at the front of `bytes` to a request
/// sent with `key`: `Ok(None)` while the head is incomplete,
/// `Ok(Some(n))` once an upgrade took the first `n` bytes.
pub fn check_answer(bytes: &[u8], key: &str) -> Result<Option<usize>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_bytes = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD_BYTES => return Ok(None),
        Ok(httparse::Status::Partial) => {
            return Err(format!("an answer head longer than {MAX_HEAD_BYTES} bytes"))
        }
        Err(error) => return Err(format!("an answer that is not HTTP: {error}")),
    };
    let header = |name: &str| header_value(parsed.headers, name).map(str::trim);
    if parsed.code != Some(101) {
        return Err(format!(
            "the peer answered the upgrade {} {}",
            parsed.code.unwrap_or(0),
            parsed.reason.unwrap_or("")
        ));
    }
    if !has_token(header("upgrade"), "websocket") || !has_token(header("connection"), "upgrade") {
        return Err("the peer's 101 does not upgrade to websocket".into());
    }
    if header("sec-websocket-accept") != Some(accept_key(key).as_str()) {
        return Err("the peer's Sec-WebSocket-Accept does not answer this request's key".into());
    }
    match header("sec-websocket-protocol") {
        Some(p) if !SUBPROTOCOLS.iter().any(|s| s.eq_ignore_ascii_case(p)) => {
            Err(format!("the peer chose the subprotocol {p:?}, not mqtt"))
        }
        _ => Ok(Some(head_bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(same_origin: bool, allowed: &[&str]) -> Origins {
        Origins::new(same_origin, allowed.iter().map(|s| s.to_string()).collect())
    }

    /// RFC 6455's own example key and the answer it gives.
    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn upgrade_request(extra: &str) -> String {
        format!(
            "GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1:8083\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
    }

    #[test]
    fn the_accept_key_is_the_rfcs() {
        assert_eq!(accept_key(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn an_upgrade_offering_mqtt_is_answered_101_choosing_it() {
        let request = upgrade_request("Sec-WebSocket-Protocol: mqtt\r\n");
        let mut bytes = request.clone().into_bytes();
        bytes.extend_from_slice(b"\x82\x80frame");
        match answer(&bytes, &origins(true, &[]), false) {
            Answer::Upgrade {
                response,
                head_bytes,
            } => {
                let response = String::from_utf8(response).unwrap();
                assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
                assert!(response.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
                assert!(response.contains("Sec-WebSocket-Protocol: mqtt\r\n"));
                assert_eq!(head_bytes, request.len(), "what follows the head is left");
            }
            other => panic!("{other:?}"),
        }
        let partial = &request.as_bytes()[..40];
        assert_eq!(
            answer(partial, &origins(true, &[]), false),
            Answer::Incomplete
        );
    }

    #[test]
    fn a_bad_handshake_is_refused_with_the_status_that_says_why() {
        let good = upgrade_request("");
        let cases = [
            (good.replace("GET", "POST"), 405),
            (good.replace("HTTP/1.1", "HTTP/1.0"), 505),
            (good.replace("Upgrade: websocket\r\n", ""), 426),
            (good.replace("keep-alive, Upgrade", "keep-alive"), 400),
            (good.replace("Version: 13", "Version: 8"), 426),
            (good.replace(KEY, "c2hvcnQ="), 400),
            (good.replace("Host: 127.0.0.1:8083\r\n", ""), 400),
            (upgrade_request("Content-Length: 5\r\n"), 400),
            (
                upgrade_request("Sec-WebSocket-Protocol: chat, superchat\r\n"),
                400,
            ),
            ("NOT HTTP\r\n\r\n".to_string(), 400),
        ];
        for (request, status) in cases {
            match answer(request.as_bytes(), &origins(true, &[]), false) {
                Answer::Refuse {
                    status: got,
                    response,
                    ..
                } => {
                    assert_eq!(got, status, "{request}");
                    let text = String::from_utf8(response).unwrap();
                    assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
                }
                other => panic!("{request}: {other:?}"),
            }
        }
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert!(matches!(
            answer(huge.as_bytes(), &origins(true, &[]), false),
            Answer::Refuse { status: 431, .. }
        ));
    }

    #[test]
    fn an_origin_the_door_does_not_admit_is_refused_403() {
        let request = upgrade_request("Origin: http://evil.example\r\n");
        match answer(request.as_bytes(), &origins(true, &[]), false) {
            Answer::Refuse { status, origin, .. } => {
                assert_eq!(status, 403);
                assert_eq!(origin.as_deref(), Some("http://evil.example"));
            }
            other => panic!("{other:?}"),
        }
        let own = upgrade_request("Origin: http://127.0.0.1:8083\r\n");
        assert!(matches!(
            answer(own.as_bytes(), &origins(true, &[]), false),
            Answer::Upgrade { .. }
        ));
    }

    #[test]
    fn a_client_checks_the_answer_to_its_own_key() {
        let (request, key) = request("peer:8083", "/mqtt", [7; 16]);
        let request = String::from_utf8(request).unwrap();
        assert!(request.starts_with("GET /mqtt HTTP/1.1\r\nHost: peer:8083\r\n"));
        let server = match answer(request.as_bytes(), &origins(false, &[]), false) {
            Answer::Upgrade { response, .. } => response,
            other => panic!("{other:?}"),
        };
        assert_eq!(check_answer(&server, &key), Ok(Some(server.len())));
        assert_eq!(check_answer(&server[..10], &key), Ok(None));
        let wrong = check_answer(&server, "c29tZSBvdGhlciBrZXkhIQ==").unwrap_err();
        assert!(wrong.contains("does not answer"), "{wrong}");
        let refused = check_answer(b"HTTP/1.1 403 Forbidden\r\n\r\n", &key).unwrap_err();
        assert!(refused.contains("403"), "{refused}");
    }
}
