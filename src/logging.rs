//! The broker's log lines: their format (`broker.log_format`), the
//! connection each one is about, and the level SIGUSR1 reads again.
//!
//! A line written while a connection's task runs carries that
//! connection's listener, remote address, client id and user. The task
//! [`enter`]s its [`Scope`], made from what the core keeps of the
//! connection, into a thread-local for the length of each poll, so every
//! line written on its behalf (by the shell or by the core it drives) is
//! tagged without each call site passing the fields. The executor is single-threaded, so a
//! thread-local is exactly "the connection being served now".

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use crate::config::LogFormat;
use crate::core::Source;

/// Reads the configured level again, for SIGUSR1; the caller knows the
/// file, so the shell reads none of its own.
pub type LevelReader = Arc<dyn Fn() -> Result<log::LevelFilter, String> + Send + Sync>;

static LEVEL_READER: OnceLock<LevelReader> = OnceLock::new();

/// Installs the logger: lines in `format` to standard output (the init
/// system bounds them), at `level`, each naming `broker_id`. `reread`,
/// where there is a file to read, is what SIGUSR1 reads the level from.
pub fn init(
    format: LogFormat,
    level: log::LevelFilter,
    broker_id: &str,
    reread: Option<LevelReader>,
) -> Result<(), log::SetLoggerError> {
    if let Some(reread) = reread {
        let _ = LEVEL_READER.set(reread);
    }
    // Leaked: it serves for the life of the process.
    log::set_logger(Box::leak(Box::new(Logger {
        format,
        broker_id: broker_id.into(),
    })))?;
    log::set_max_level(level);
    Ok(())
}

/// What SIGUSR1 reads the level with; `None` without a configuration file.
pub(crate) fn level_reader() -> Option<LevelReader> {
    LEVEL_READER.get().cloned()
}

/// The connection a line is about; fields learnt later stay `None` until
/// then (the client id and user arrive with its CONNECT). Each field is
/// the core's own `Rc<str>`, not a copy (rfcs/0003, "Per-connection
/// memory").
#[derive(Debug, Default, Clone)]
pub struct Scope {
    pub listener: Rc<str>,
    pub remote: Option<Source>,
    pub client_id: Option<Rc<str>>,
    pub user: Option<Rc<str>>,
}

thread_local! {
    /// The scope of the task being polled.
    static CURRENT: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// The connection being served has been admitted as `client_id` (and
/// `user`), from `source` where its door learnt one: its lines from here
/// on say so. Called by the core as it admits a connection; outside a
/// connection's task (a unit test, a bridge) it does nothing.
pub(crate) fn connected(client_id: &Rc<str>, user: Option<&Rc<str>>, source: Option<&Source>) {
    CURRENT.with(|current| {
        if let Some(scope) = &mut *current.borrow_mut() {
            scope.client_id = Some(Rc::clone(client_id));
            scope.user = user.cloned();
            if let Some(source) = source {
                scope.remote = Some(source.clone());
            }
        }
    });
}

/// Puts `scope` in force until the guard is dropped, when the one in
/// force before it is back. A connection's future enters its scope for
/// the length of each poll, made then from what the core keeps of it, so
/// an idle connection carries no copy of its own.
pub fn enter(scope: Option<Scope>) -> Entered {
    Entered {
        outer: CURRENT.with(|c| c.replace(scope)),
    }
}

/// The scope entered, in force while this lives (see [`enter`]).
pub struct Entered {
    outer: Option<Scope>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let left = CURRENT.with(|c| c.replace(self.outer.take()));
        drop(left);
    }
}

struct Logger {
    format: LogFormat,
    broker_id: String,
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = CURRENT.with(|c| {
            let scope = c.borrow();
            render(
                self.format,
                &self.broker_id,
                now_unix_ms(),
                record,
                scope.as_ref(),
            )
        });
        // A closed standard output must not stop the broker.
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stdout().flush();
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One line, newline included.
fn render(
    format: LogFormat,
    broker_id: &str,
    unix_ms: u64,
    record: &log::Record,
    scope: Option<&Scope>,
) -> String {
    let time = timestamp(unix_ms);
    let message = record.args().to_string();
    // The remote is kept as an address: written as text only here.
    let remote = scope.and_then(|s| s.remote.as_ref()).map(Source::to_string);
    let mut fields: Vec<(&str, &str)> = Vec::with_capacity(6);
    if let Some(scope) = scope {
        fields.push(("listener", &scope.listener));
        for (key, value) in [
            ("remote", remote.as_deref()),
            ("client_id", scope.client_id.as_deref()),
            ("user", scope.user.as_deref()),
        ] {
            if let Some(value) = value {
                fields.push((key, value));
            }
        }
    }
    let mut out = String::with_capacity(message.len() + 96);
    match format {
        LogFormat::Text => {
            // As the broker always wrote it; a connection's fields follow
            // the target in brackets.
            let _ = write!(out, "{time} {:<5} [{}]", record.level(), record.target());
            if !fields.is_empty() {
                out.push_str(" [");
                for (i, (key, value)) in fields.iter().enumerate() {
                    let space = if i == 0 { "" } else { " " };
                    let _ = write!(out, "{space}{key} {value}");
                }
                out.push(']');
            }
            let _ = write!(out, " {message}");
        }
        LogFormat::Logfmt => {
            let level = record.level().as_str().to_ascii_lowercase();
            let head = [
                ("time", time.as_str()),
                ("level", level.as_str()),
                ("target", record.target()),
                ("broker", broker_id),
            ];
            for (i, (key, value)) in head.iter().chain(&fields).enumerate() {
                let space = if i == 0 { "" } else { " " };
                let _ = write!(out, "{space}{key}={}", logfmt_value(value));
            }
            let _ = write!(out, " msg={}", logfmt_value(&message));
        }
        LogFormat::Json => {
            let level = record.level().as_str().to_ascii_lowercase();
            let head = [
                ("time", time.as_str()),
                ("level", level.as_str()),
                ("target", record.target()),
                ("broker", broker_id),
            ];
            out.push('{');
            for (key, value) in head.iter().chain(&fields) {
                let _ = write!(out, "\"{key}\":{},", crate::ops::json::string(value));
            }
            let _ = write!(out, "\"msg\":{}}}", crate::ops::json::string(&message));
        }
    }
    out.push('\n');
    out
}

/// A logfmt value: bare where it can be, else quoted with `"` and `\`
/// escaped and control characters written as escapes.
fn logfmt_value(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| c > ' ' && c != '"' && c != '=' && c != '\\' && !c.is_control());
    if bare {
        return value.to_string();
    }
    crate::ops::json::string(value)
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds.
fn timestamp(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, in_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = crate::ops::json::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(format: LogFormat, message: &str, scope: Option<&Scope>) -> String {
        let args = format_args!("{message}");
        let record = log::Record::builder()
            .args(args)
            .level(log::Level::Info)
            .target("saguin::net")
            .build();
        render(format, "edge-1", 1_764_000_000_123, &record, scope)
    }

    fn scope() -> Scope {
        Scope {
            listener: "tcp".into(),
            remote: Some(Source::Peer("127.0.0.1:5000".parse().expect("an address"))),
            client_id: Some("pump 7".into()),
            user: None,
        }
    }

    /// The listener of the scope in force now, if any.
    fn listener_now() -> Option<String> {
        CURRENT.with(|c| c.borrow().as_ref().map(|s| s.listener.to_string()))
    }

    fn listener(name: &str) -> Option<Scope> {
        Some(Scope {
            listener: name.into(),
            ..Scope::default()
        })
    }

    #[test]
    fn a_scope_is_in_force_while_entered_and_learns_who_connected() {
        {
            let _entered = enter(listener("tcp"));
            assert_eq!(listener_now().as_deref(), Some("tcp"));
            let peer = Source::Peer("10.0.0.9:4000".parse().expect("an address"));
            connected(&"pump 7".into(), None, Some(&peer));
            let scope = CURRENT.with(|c| c.borrow().clone()).expect("in force");
            assert_eq!(scope.client_id.as_deref(), Some("pump 7"));
            assert_eq!(scope.remote, Some(peer));
        }
        assert_eq!(listener_now(), None);
        // Outside any scope, nothing to tell.
        connected(&"pump 8".into(), None, None);
        assert_eq!(listener_now(), None);
    }

    #[test]
    fn a_scope_entered_inside_another_gives_the_outer_one_back() {
        let _outer = enter(listener("outer"));
        {
            let _inner = enter(listener("inner"));
            assert_eq!(listener_now().as_deref(), Some("inner"));
        }
        assert_eq!(listener_now().as_deref(), Some("outer"));
    }

    #[test]
    fn text_is_as_before_and_names_the_connection_readably() {
        assert_eq!(
            line(LogFormat::Text, "bound", None),
            "2025-11-24T16:00:00.123Z INFO  [saguin::net] bound\n"
        );
        assert_eq!(
            line(LogFormat::Text, "hello", Some(&scope())),
            "2025-11-24T16:00:00.123Z INFO  [saguin::net] [listener tcp remote 127.0.0.1:5000 client_id pump 7] hello\n"
        );
    }

    #[test]
    fn logfmt_quotes_what_is_not_bare() {
        assert_eq!(
            line(LogFormat::Logfmt, "said \"hi\"", Some(&scope())),
            "time=2025-11-24T16:00:00.123Z level=info target=saguin::net broker=edge-1 \
             listener=tcp remote=127.0.0.1:5000 client_id=\"pump 7\" msg=\"said \\\"hi\\\"\"\n"
        );
    }

    #[test]
    fn json_is_one_object_a_line() {
        assert_eq!(
            line(LogFormat::Json, "a\nb", None),
            "{\"time\":\"2025-11-24T16:00:00.123Z\",\"level\":\"info\",\"target\":\"saguin::net\",\
             \"broker\":\"edge-1\",\"msg\":\"a\\nb\"}\n"
        );
    }
}
