//! Debian's headless Chromium, driven over its DevTools protocol through
//! a pipe (`--remote-debugging-pipe`: commands on its descriptor 3,
//! answers on 4, each a JSON text ended by a NUL), so a test needs no
//! browser download, no npm package and no port: it opens a page, reads
//! what the page shows by evaluating an expression in it, and takes a
//! screenshot. Each browser has a profile of its own, removed with it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

use super::{TempDir, WAIT};

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether Chromium is installed; says loudly when it is not.
pub fn have_chromium(test: &str) -> bool {
    let found = Path::new(CHROMIUM).exists();
    if !found {
        let message = format!(
            "\n*** SKIPPED {test}: {CHROMIUM} is not installed (apt-get install chromium) ***\n"
        );
        let _ = std::io::stderr().write_all(message.as_bytes());
    }
    found
}

/// One headless browser showing one page.
pub struct Chromium {
    child: Child,
    commands: ChildStdin,
    answers: Receiver<String>,
    next_id: u64,
    session: String,
    _profile: TempDir,
}

impl Chromium {
    /// A browser `width` x `height` CSS pixels, showing `url`.
    pub fn open(url: &str, width: u32, height: u32) -> Chromium {
        let profile = TempDir::new("chromium-profile");
        // The shell moves the pipe's two ends to the descriptors Chromium
        // reads and writes the protocol on.
        let script = format!(
            "exec {CHROMIUM} --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars --remote-debugging-pipe --user-data-dir='{}' 3<&0 4>&1 0</dev/null 1>/dev/null 2>/dev/null",
            profile.path().display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let commands = child.stdin.take().unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let (sender, answers) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut message = Vec::new();
            match reader.read_until(0, &mut message) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    message.pop_if(|b| *b == 0);
                    if sender
                        .send(String::from_utf8_lossy(&message).into_owned())
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        let mut browser = Chromium {
            child,
            commands,
            answers,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let created = browser.call("Target.createTarget", "{\"url\":\"about:blank\"}");
        let target = string_at(&created, "targetId").expect("a target id");
        let attached = browser.call(
            "Target.attachToTarget",
            &format!("{{\"targetId\":\"{target}\",\"flatten\":true}}"),
        );
        browser.session = string_at(&attached, "sessionId").expect("a session id");
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            &format!("{{\"width\":{width},\"height\":{height},\"deviceScaleFactor\":1,\"mobile\":false}}"),
        );
        browser.call("Page.navigate", &format!("{{\"url\":\"{url}\"}}"));
        browser
    }

    /// Sends `method` with `params` (JSON) and returns its answer, whole;
    /// fails the test on an error or no answer.
    fn call(&mut self, method: &str, params: &str) -> String {
        self.next_id += 1;
        let id = self.next_id;
        let session = if self.session.is_empty() {
            String::new()
        } else {
            format!(",\"sessionId\":\"{}\"", self.session)
        };
        let command =
            format!("{{\"id\":{id},\"method\":\"{method}\",\"params\":{params}{session}}}\0");
        self.commands.write_all(command.as_bytes()).unwrap();
        self.commands.flush().unwrap();
        let prefix = format!("{{\"id\":{id},");
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self
                .answers
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("chromium did not answer {method}"));
            if message.starts_with(&prefix) {
                assert!(
                    !message[prefix.len()..].starts_with("\"error\""),
                    "{method}: {message}"
                );
                return message;
            }
        }
    }

    /// What `expression`, evaluated in the page, gives as a string; an
    /// exception it throws fails the test.
    pub fn evaluate(&mut self, expression: &str) -> String {
        let params = format!(
            "{{\"expression\":{},\"returnByValue\":true}}",
            json_string(&format!("String({expression})"))
        );
        let answer = self.call("Runtime.evaluate", &params);
        assert!(
            !answer.contains("\"exceptionDetails\""),
            "{expression}: {answer}"
        );
        string_at(&answer, "value").unwrap_or_else(|| panic!("{expression}: {answer}"))
    }

    /// Evaluates `expression` until it gives `wanted`; fails the test,
    /// naming the last answer, when it does not within [`WAIT`].
    pub fn wait_for(&mut self, expression: &str, wanted: &str) {
        self.wait_for_within(expression, wanted, WAIT);
    }

    /// [`Chromium::wait_for`], waiting at most `wait`.
    pub fn wait_for_within(&mut self, expression: &str, wanted: &str, wait: std::time::Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let got = self.evaluate(expression);
            if got == wanted {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page shows {got:?} for {expression}, not {wanted:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The page as it is drawn now, as PNG.
    pub fn screenshot_png(&mut self) -> Vec<u8> {
        use base64ct::{Base64, Encoding};
        let answer = self.call("Page.captureScreenshot", "{\"format\":\"png\"}");
        let data = string_at(&answer, "data").expect("screenshot data");
        Base64::decode_vec(&data).expect("base64")
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The first string value of `key` in the JSON text `message`,
/// unescaped: enough of JSON for the protocol's answers.
fn string_at(message: &str, key: &str) -> Option<String> {
    let start = message.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = message[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let unit = u32::from_str_radix(&hex, 16).ok()?;
                    // A surrogate pair is two escapes.
                    let c = if (0xD800..0xDC00).contains(&unit) {
                        let next: String = chars.by_ref().take(6).collect();
                        let low = u32::from_str_radix(next.get(2..)?, 16).ok()?;
                        char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                    } else {
                        char::from_u32(unit)?
                    };
                    out.push(c);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}
