//! `saguin backup ADDRESS DIR`: asks a running broker, through its
//! operations listener, for an online backup of every redb provider into
//! `DIR` on the broker's machine, and waits for the verified copies.
//!
//! `ADDRESS` is the operations door: `host:port`, or the path of its Unix
//! socket. A door that needs a credential takes one from the environment,
//! `SAGUIN_OPERATOR=name:password`, so that it never shows in a process
//! list.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use base64ct::{Base64, Encoding};

/// The route that starts a backup.
pub const ROUTE: &str = "/v1/operations/backup";

/// The environment variable a credential is read from.
pub const CREDENTIAL_VARIABLE: &str = "SAGUIN_OPERATOR";

/// How long the tool waits for the broker's answer: a backup of a large
/// provider on a slow card takes minutes.
const ANSWER_TIMEOUT_S: u64 = 3_600;

/// The largest answer read; one line per provider fits many times over.
const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// What the broker answered.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Every byte outside the unreserved set percent-encoded, for a query.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The request for a backup into `dir`, with a Basic credential if given.
pub fn request(dir: &str, credential: Option<&str>) -> String {
    let mut head = format!(
        "POST {ROUTE}?dir={} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n{}: backup\r\nConnection: close\r\n",
        percent_encode(dir),
        crate::ops::route::REQUEST_HEADER
    );
    if let Some(credential) = credential {
        head.push_str(&format!(
            "Authorization: Basic {}\r\n",
            Base64::encode_string(credential.as_bytes())
        ));
    }
    head.push_str("\r\n");
    head
}

/// Reads an HTTP/1.1 answer to a request sent with `Connection: close`.
fn parse(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split(' ').nth(1)?.parse().ok()?;
    Some(Answer {
        status,
        body: body.to_string(),
    })
}

fn exchange(mut stream: impl Read + Write, request: &str) -> io::Result<Answer> {
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.take(MAX_ANSWER_BYTES).read_to_end(&mut raw)?;
    parse(&raw).ok_or_else(|| io::Error::other("the answer is not HTTP"))
}

/// Sends the request to the door at `address` and reads the answer.
pub fn ask(address: &str, dir: &str, credential: Option<&str>) -> io::Result<Answer> {
    let request = request(dir, credential);
    let timeout = Some(Duration::from_secs(ANSWER_TIMEOUT_S));
    if address.starts_with('/') {
        let stream = UnixStream::connect(address)?;
        stream.set_read_timeout(timeout)?;
        exchange(stream, &request)
    } else {
        let stream = TcpStream::connect(address)?;
        stream.set_read_timeout(timeout)?;
        exchange(stream, &request)
    }
}

/// Checks what the tool can before asking: an absolute directory that
/// exists. The broker checks again, since it writes there.
pub fn check_dir(dir: &str) -> Result<(), String> {
    let path = Path::new(dir);
    if !path.is_absolute() {
        return Err(format!(
            "{dir}: the backup directory must be an absolute path, as the broker sees it"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_carries_the_directory_and_a_basic_credential() {
        let text = request("/var/backups/saguin x", Some("ops:s3cret"));
        assert!(
            text.starts_with("POST /v1/operations/backup?dir=/var/backups/saguin%20x HTTP/1.1\r\n")
        );
        assert!(
            text.contains("Authorization: Basic b3BzOnMzY3JldA==\r\n"),
            "{text}"
        );
        // What tells the listener no web page of another site sent it.
        assert!(text.contains("X-Saguin-Request: backup\r\n"), "{text}");
    }

    #[test]
    fn an_answer_is_its_status_and_body() {
        let answer =
            parse(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!(
            answer,
            Answer {
                status: 500,
                body: "{}".into()
            }
        );
        assert!(parse(b"garbage").is_none());
    }
}
