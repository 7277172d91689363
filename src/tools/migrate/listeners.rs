//! mosquitto's listeners, and the options written under one, as this
//! broker's MQTT doors.
//!
//! A plain or TLS listener becomes a `tcp` door, a `protocol websockets`
//! one a `ws` door, and a Unix-socket one (`listener 0 PATH`) a `unix`
//! door.

use std::path::{Path, PathBuf};

use serde_yaml::Mapping;

use super::conf::Line;
use super::put;
use super::Failure;

/// The keys mosquitto reads for the listener they are written under,
/// beside its certificate keys ([`TLS_KEYS`]).
const GENERAL_KEYS: &[&str] = &[
    "bind_address",
    "bind_interface",
    "http_dir",
    "max_connections",
    "max_qos",
    "max_topic_alias",
    "mount_point",
    "port",
    "protocol",
    "socket_domain",
    "use_username_as_clientid",
    "psk_hint",
];

/// Whether mosquitto gives `key` to the listener it is written under.
pub fn is_listener_key(key: &str) -> bool {
    GENERAL_KEYS.contains(&key) || TLS_KEYS.contains(&key)
}

/// The keys a listener takes for itself when `per_listener_settings` is
/// true, and the broker takes otherwise.
pub const SECURITY_KEYS: &[&str] = &[
    "password_file",
    "acl_file",
    "allow_anonymous",
    "allow_zero_length_clientid",
    "auto_id_prefix",
    "psk_file",
    "auth_plugin",
    "plugin",
];

/// Who a listener admits, as its options say; the broker's when
/// `per_listener_settings` is false.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub password_file: Option<(PathBuf, Line)>,
    pub acl_file: Option<(PathBuf, Line)>,
    pub allow_anonymous: Option<(bool, Line)>,
}

/// One listener as written.
#[derive(Clone, Debug)]
pub struct Listener {
    /// Its `listener` line; `None` for the default listener, which `port`
    /// and `bind_address` or the options before any `listener` make.
    pub line: Option<Line>,
    pub port: u16,
    /// The address, host name or Unix socket path it binds.
    pub host: Option<String>,
    /// Every option written under it, `listener` line excepted.
    pub options: Vec<Line>,
    pub security: Security,
}

impl Listener {
    pub fn new(line: Option<Line>, port: u16, host: Option<String>) -> Listener {
        Listener {
            line,
            port,
            host,
            options: Vec::new(),
            security: Security::default(),
        }
    }

    fn last(&self, key: &str) -> Option<&Line> {
        self.options.iter().rev().find(|l| l.key == key)
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, Failure> {
        self.last(key).map(super::boolean).transpose()
    }

    /// `websockets`, or `None` for MQTT.
    fn protocol(&self) -> Result<Option<&Line>, Failure> {
        match self.last("protocol") {
            Some(line) if line.value() == "websockets" => Ok(Some(line)),
            Some(line) if line.value() == "mqtt" => Ok(None),
            Some(line) => Err(line.fail("protocol is mqtt or websockets")),
            None => Ok(None),
        }
    }

    pub fn is_unix(&self) -> bool {
        self.port == 0
    }

    /// The kind of door it becomes: `tcp`, `ws` or `unix`.
    pub fn kind(&self) -> Result<&'static str, Failure> {
        Ok(match (self.is_unix(), self.protocol()?) {
            (true, _) => "unix",
            (false, Some(_)) => "ws",
            (false, None) => "tcp",
        })
    }

    /// Whether the certificate a client presents names it here, with no
    /// password asked: `require_certificate` with a `cafile`.
    pub fn names_by_certificate(&self) -> Result<bool, Failure> {
        Ok(self.flag("require_certificate")? == Some(true) && self.last("cafile").is_some())
    }
}

/// What became of one listener: its door, or why it has none.
pub struct Door {
    /// The door's block; `None` for a listener left out.
    pub block: Option<Mapping>,
    /// The outcome of its `listener` line and of each option under it.
    pub outcomes: Vec<(Line, String)>,
}

/// The door for `listener`, named `name`; `base` resolves relative paths.
pub fn door(listener: &Listener, name: &str, base: &Path) -> Result<Door, Failure> {
    let kind = listener.kind()?;
    let key = format!("broker.mqtt.listen.{kind}[{name}]");
    let mut outcomes: Vec<(Line, String)> = Vec::new();
    let mut block = Mapping::new();
    put(&mut block, "name", name);
    if kind == "unix" {
        unix_door(listener, &key, &mut block, &mut outcomes)?;
        return Ok(Door {
            block: Some(block),
            outcomes,
        });
    }
    let domain = listener.last("socket_domain").map(Line::value);
    let written = address(listener, domain.as_deref());
    put(&mut block, "address", written.as_str());
    let listener_outcome = match (&listener.host, domain.as_deref()) {
        (Some(_), _) => format!("became {key}, address {written}"),
        (None, Some("ipv6")) => format!("became {key}, address {written}: IPv6 and, where the kernel maps them, IPv4 clients"),
        (None, _) => format!("became {key}, address {written}: IPv4 only, where mosquitto listened on IPv6 too; write [::]:{} for both", listener.port),
    };
    if let Some(line) = &listener.line {
        outcomes.push((line.clone(), listener_outcome));
    }
    if let Some(line) = listener.protocol()? {
        // mosquitto answers an upgrade from any page; a page of another
        // origin could then speak MQTT with its visitor's reach.
        outcomes.push((line.clone(), format!("became {key}; differs: a browser page from another origin than the door's own is refused 403 here (same_origin: true); list the dashboards' origins in {key}.allowed_origins")));
    }
    let tls = tls_block(listener, &key, base, &mut outcomes)?;
    if let Some(tls) = tls {
        put(&mut block, "tls", tls);
    }
    for option in &listener.options {
        // Who it admits is the broker's to say, door by door.
        if outcomes.iter().any(|(l, _)| l == option) || SECURITY_KEYS.contains(&option.key.as_str())
        {
            continue;
        }
        let outcome = match option.key.as_str() {
            "port" | "bind_address" => format!("became {key}, address {written}"),
            "socket_domain" => format!("became {key}'s address {written}"),
            "max_connections" => continue,
            "http_dir" => "not carried: no door serves HTTP files".into(),
            other => other_option(other),
        };
        outcomes.push((option.clone(), outcome));
    }
    Ok(Door {
        block: Some(block),
        outcomes,
    })
}

/// A Unix-socket listener's door: its path, and a mode that says who may
/// connect, which mosquitto left to the umask it was started with.
fn unix_door(
    listener: &Listener,
    key: &str,
    block: &mut Mapping,
    outcomes: &mut Vec<(Line, String)>,
) -> Result<(), Failure> {
    let Some(path) = listener.host.as_deref() else {
        let line = listener.line.as_ref().expect("a Unix listener is written");
        return Err(line.fail(
            "port 0 is a Unix socket, and needs its path: listener 0 /run/mosquitto/mqtt.sock",
        ));
    };
    put(block, "path", path);
    if let Some(line) = &listener.line {
        outcomes.push((line.clone(), format!("became {key}, path {path}, mode 0660 (the default: its owner and group may connect); mosquitto left the socket's permissions to its umask, so write mode: \"0666\" if every local user connected")));
    }
    for option in &listener.options {
        if SECURITY_KEYS.contains(&option.key.as_str()) {
            continue;
        }
        let outcome = match option.key.as_str() {
            "max_connections" => continue,
            "protocol" | "socket_domain" | "bind_address" | "port" | "http_dir" => {
                "not carried: a Unix door takes MQTT at its path and nothing else".into()
            }
            key if TLS_KEYS.contains(&key) => {
                "not carried: a Unix door serves no TLS; its file's mode decides who connects"
                    .into()
            }
            other => other_option(other),
        };
        outcomes.push((option.clone(), outcome));
    }
    Ok(())
}

/// What becomes of a listener option no door of any kind takes.
fn other_option(key: &str) -> String {
    match key {
        "bind_interface" => "not carried: a door binds an address; write the interface's address in its listener line".into(),
        "max_qos" => "not carried: every door takes QoS 0 to 2; an acl_file role with broker: features and deny: [qos2] caps a user at QoS 1".into(),
        "max_topic_alias" => "not carried: this broker offers MQTT 5 clients a fixed 16 topic aliases".into(),
        "mount_point" => "ACTION: not carried: no door prefixes its clients' topics; clients must use the whole topics".into(),
        "use_username_as_clientid" => "not carried: an acl_file's users: entry with client_ids: \"%u\" refuses a client id other than the user name instead".into(),
        "psk_hint" => "not carried: TLS with pre-shared keys is not served; use certificates".into(),
        _ => "not carried".into(),
    }
}

/// `host:port` for a door, IPv6 in brackets; every interface where no
/// host is written, IPv4's unless `socket_domain ipv6`.
fn address(listener: &Listener, domain: Option<&str>) -> String {
    match (&listener.host, domain) {
        (Some(host), _) if host.contains(':') => format!("[{host}]:{}", listener.port),
        (Some(host), _) => format!("{host}:{}", listener.port),
        (None, Some("ipv6")) => format!("[::]:{}", listener.port),
        (None, _) => format!("0.0.0.0:{}", listener.port),
    }
}

/// A path as this broker takes it: absolute, a relative one read against
/// the directory of the file that names it.
pub fn absolute(base: &Path, line: &Line) -> (PathBuf, Option<String>) {
    let written = PathBuf::from(line.value());
    match written.is_absolute() {
        true => (written, None),
        false => {
            let path = base.join(&written);
            let note = format!(" (read as {}: paths here are absolute)", path.display());
            (path, Some(note))
        }
    }
}

/// The door's `tls` block, when the listener serves TLS.
fn tls_block(
    listener: &Listener,
    key: &str,
    base: &Path,
    outcomes: &mut Vec<(Line, String)>,
) -> Result<Option<Mapping>, Failure> {
    let (cert, keyfile) = (listener.last("certfile"), listener.last("keyfile"));
    let (cert, keyfile) = match (cert, keyfile) {
        (Some(c), Some(k)) => (c, k),
        (None, None) => {
            for option in listener.options.iter().filter(|o| TLS_KEYS.contains(&o.key.as_str())) {
                outcomes.push((option.clone(), "not carried: the listener has no certfile and keyfile, so it serves no TLS".into()));
            }
            return Ok(None);
        }
        (Some(line), None) | (None, Some(line)) => {
            return Err(line.fail("certfile and keyfile go together, and mosquitto refuses one alone; write both or neither"))
        }
    };
    let mut tls = Mapping::new();
    let tls_key = format!("{key}.tls");
    for (line, name) in [(cert, "cert_file"), (keyfile, "key_file")] {
        let (path, note) = absolute(base, line);
        put(&mut tls, name, path.display().to_string());
        outcomes.push((
            line.clone(),
            format!("became {tls_key}.{name}{}", note.unwrap_or_default()),
        ));
    }
    let require = listener.flag("require_certificate")?;
    let identity = listener.flag("use_identity_as_username")?;
    let cafile = listener.last("cafile");
    match (cafile, require) {
        (Some(ca), Some(true)) => {
            let (path, note) = absolute(base, ca);
            put(&mut tls, "client_ca_file", path.display().to_string());
            outcomes.push((ca.clone(), format!("became {tls_key}.client_ca_file{}", note.unwrap_or_default())));
        }
        (Some(ca), _) => outcomes.push((ca.clone(), "not carried: without require_certificate true mosquitto asks no client for a certificate, so it verified none with it".into())),
        (None, Some(true)) => {
            let line = listener.last("require_certificate").expect("read above");
            return Err(line.fail("require_certificate true needs the cafile that client certificates are checked against; write cafile, or remove require_certificate"));
        }
        (None, _) => {}
    }
    if let Some(line) = listener.last("require_certificate") {
        let outcome = match (require, identity) {
            (Some(true), Some(true)) => format!("became {tls_key}.require_certificate true (the default)"),
            (Some(true), _) => format!("became {tls_key}.require_certificate true; differs: the certificate's Common Name is the client's user name here and no password is asked, where mosquitto without use_identity_as_username asked the password file too"),
            _ => "nothing to carry: no client certificate is asked for".into(),
        };
        outcomes.push((line.clone(), outcome));
    }
    if let Some(line) = listener.last("use_identity_as_username") {
        let outcome = match (identity, require) {
            (Some(true), Some(true)) => "carried: a verified certificate's Common Name is always the client's user name here, and the password file is not asked".into(),
            (Some(true), _) => "not carried: without require_certificate true mosquitto had no certificate to take a name from".into(),
            _ => "nothing to carry".into(),
        };
        outcomes.push((line.clone(), outcome));
    }
    if let Some(line) = listener.last("tls_version") {
        let (version, outcome) = match line.value().as_str() {
            "tlsv1.3" => ("1.3", format!("became {tls_key}.min_version \"1.3\"")),
            "tlsv1.2" => ("1.2", format!("became {tls_key}.min_version \"1.2\"")),
            "tlsv1.1" => ("1.2", format!("became {tls_key}.min_version \"1.2\": TLS 1.1 is not served here, so clients that only speak it are refused")),
            _ => return Err(line.fail("tls_version is tlsv1.3, tlsv1.2 or tlsv1.1")),
        };
        put(&mut tls, "min_version", version);
        outcomes.push((line.clone(), outcome));
    }
    for option in listener
        .options
        .iter()
        .filter(|o| TLS_KEYS.contains(&o.key.as_str()))
    {
        if outcomes.iter().any(|(l, _)| l == option) {
            continue;
        }
        let outcome = match option.key.as_str() {
            "capath" => "not carried: name the authorities in one file (cat DIR/*.pem > ca.pem) and write it as cafile",
            "ciphers" | "ciphers_tls1.3" => "not carried: the cipher suites are rustls's safe defaults, not chosen per door",
            "crlfile" => "ACTION: not carried: no revocation list is read; revoke by removing the device's user name from the acl_file",
            "dhparamfile" => "not carried: key exchange is ECDHE only, which needs no parameters file",
            "use_subject_as_username" => "ACTION: not carried: the user name is the certificate's Common Name, never its whole subject; rename the users in the acl_file",
            _ => "not carried: keys in files only; no engine is used",
        };
        outcomes.push((option.clone(), outcome.to_string()));
    }
    Ok(Some(tls))
}

/// The certificate options of a listener.
const TLS_KEYS: &[&str] = &[
    "cafile",
    "capath",
    "certfile",
    "ciphers",
    "ciphers_tls1.3",
    "crlfile",
    "dhparamfile",
    "keyfile",
    "require_certificate",
    "tls_engine",
    "tls_engine_kpass_sha1",
    "tls_keyform",
    "tls_version",
    "use_identity_as_username",
    "use_subject_as_username",
];
