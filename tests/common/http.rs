//! An HTTP response as the operations tests read it, whoever fetched it
//! (a raw socket or curl), and the Prometheus text parser they check it with.

use std::process::Command;

/// A response: its status, its head and its body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    /// Splits a whole response; `None` when it has no blank line after its
    /// head.
    pub fn parse(text: &str) -> Option<Answer> {
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split(' ').nth(1)?.parse().ok()?;
        Some(Answer {
            status,
            head: head.to_string(),
            body: body.to_string(),
        })
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// What a plain GET of `path` at the operations door `address` answered,
/// whole: the status line, the head and the body.
pub fn get_text(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(super::WAIT)).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The body of a GET of `path` at `address`, which must answer 200.
pub fn get_body(address: &str, path: &str) -> String {
    let text = get_text(address, path);
    let answer = Answer::parse(&text).unwrap_or_else(|| panic!("{path}: {text}"));
    assert_eq!(answer.status, 200, "{path}: {}", answer.head);
    answer.body
}

/// The value of the sample written exactly as `series` (name and labels)
/// in a Prometheus scrape.
pub fn sample<T: std::str::FromStr>(body: &str, series: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{body}"))
        .parse()
        .unwrap()
}

/// Runs `script` under python3 with Prometheus text `body` on its standard
/// input, the script importing `prometheus_client`; what it printed, or
/// `None` (said loudly) when python3 or the parser is not installed.
pub fn prometheus_client(script: &str, body: &str) -> Option<String> {
    let mut python = Command::new("python3");
    python.arg("-c").arg(script);
    let Ok(output) = super::output_with_input(&mut python, body) else {
        eprintln!("SKIPPED the prometheus_client parse: python3 is missing");
        return None;
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("No module named 'prometheus_client'") {
        eprintln!("SKIPPED the prometheus_client parse: pip install prometheus_client");
        return None;
    }
    assert!(
        output.status.success(),
        "prometheus_client refused the body: {stderr}"
    );
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}
