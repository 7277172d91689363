//! `broker.operations`: the operations listener's doors, its operators
//! and how often its metrics are recomputed.
//!
//! `listen.tcp` and `listen.unix` each take the shape an MQTT listen kind
//! takes: one door as a mapping named after its kind, or a list of doors
//! each with a name. Names are unique among the operations doors alone;
//! ports are compared with the MQTT doors too, since the kernel does not
//! know which block asked.

use std::path::Path;
use std::sync::Arc;

use serde_yaml::Value;

use super::address::{clashes, door_address, parse_address};
use super::findings::Findings;
// A door takes the keys an MQTT door of its kind does (the operations
// listener refuses allow_anonymous by name, below).
use super::listen::{door_name, MqttDoor, TCP_KEYS, UNIX_KEYS};
use super::sockets::{self, absolute_file};
use super::table::{table, Keys, Table};
use super::values::{count_key, duration_ms, whole_seconds, CountRule, NoneRule};
use crate::net::Listen;
use crate::ops::operators::Operators;
use crate::ops::{self, route::ROUTES, MIN_SCRAPE_INTERVAL_S};

const BLOCK: &str = "broker.operations";

const BLOCK_KEYS: Keys = Keys {
    supported: &[
        "listen",
        "password_file",
        "min_scrape_interval",
        "max_connections",
    ],
    not_yet: &[],
};

const LISTEN_KEYS: Keys = Keys {
    supported: &["tcp", "unix"],
    not_yet: &[],
};

/// Reads `broker.operations`; `Some(None)` when it is absent, which opens
/// no listener.
pub(super) fn parse(
    f: &mut Findings,
    value: Option<&Value>,
    mqtt_doors: Option<&[MqttDoor]>,
) -> Option<Option<ops::Settings>> {
    let Some(value) = value else {
        return Some(None);
    };
    let t = table(f, BLOCK, value, &BLOCK_KEYS)?;
    let password_file = operators(f, &format!("{BLOCK}.password_file"), t.get("password_file"));
    let interval = min_scrape_interval(f, t.get("min_scrape_interval"));
    let max_connections = max_connections(f, t.get("max_connections"));
    let listen_path = format!("{BLOCK}.listen");
    let Some(listen_value) = t.get("listen") else {
        f.key(
            &listen_path,
            "missing: name at least one door, tcp: with an address such as 127.0.0.1:9090 or unix: with a path; remove broker.operations for no listener",
        );
        return None;
    };
    let listen = table(f, &listen_path, listen_value, &LISTEN_KEYS)?;
    if listen.get("tcp").is_none() && listen.get("unix").is_none() {
        f.key(
            &listen_path,
            "names no door, so nothing would serve /health or /metrics; write tcp: or unix: under it, or remove broker.operations",
        );
        return None;
    }
    let tcp = doors(f, &listen_path, &listen, "tcp", &TCP_KEYS, |f, path, t| {
        tcp_door(f, path, t)
    });
    let unix = doors(f, &listen_path, &listen, "unix", &UNIX_KEYS, unix_door);
    let password_file = password_file?;
    let (tcp, unix) = (tcp?, unix?);
    let names: Vec<(&str, &str)> = tcp
        .iter()
        .map(|(p, d)| (p.as_str(), d.name.as_str()))
        .chain(unix.iter().map(|(p, d)| (p.as_str(), d.name.as_str())))
        .collect();
    let mut clean = true;
    for (j, (path, name)) in names.iter().enumerate() {
        if let Some((first, _)) = names[..j].iter().find(|(_, other)| other == name) {
            f.key(
                &format!("{path}.name"),
                format!("{name:?} is already the name of the operations door at {first}; every operations door needs a name of its own"),
            );
            clean = false;
        }
    }
    for (path, door) in &tcp {
        clean &= check_tcp_door(f, path, door, &tcp, password_file.is_some(), mqtt_doors);
    }
    let mqtt_sockets: Vec<(String, &Path)> = mqtt_doors
        .unwrap_or_default()
        .iter()
        .filter_map(|d| match &d.listen {
            Listen::Unix { path, .. } => Some((
                format!("broker.mqtt.listen.unix {:?}", d.name),
                path.as_path(),
            )),
            _ => None,
        })
        .collect();
    for (j, (path, door)) in unix.iter().enumerate() {
        if door.proxy_protocol && door.password_file.is_none() && password_file.is_none() {
            // Behind a PROXY header nothing but a verified certificate names
            // a caller, and with no operators every other caller is the
            // trusted nobody, whom a socket door serves every route.
            f.key(
                &format!("{path}.proxy_protocol"),
                format!("true with no operators file would serve every caller the proxy in front admits, certificate or not, every route included: set {BLOCK}.password_file or {path}.password_file, so a caller the proxy names nobody is asked for a credential"),
            );
            clean = false;
        }
        let earlier = unix[..j]
            .iter()
            .map(|(p, d)| (format!("the operations door at {p}"), d.path.as_path()));
        let mqtt = mqtt_sockets
            .iter()
            .map(|(p, socket)| (format!("the door at {p}"), *socket));
        if let Some((first, _)) = mqtt
            .chain(earlier)
            .find(|(_, socket)| sockets::same_socket(socket, &door.path))
        {
            f.key(
                &format!("{path}.path"),
                format!("{} is already the socket of {first}", door.path.display()),
            );
            clean = false;
        }
    }
    if !clean {
        return None;
    }
    Some(Some(ops::Settings {
        tcp: tcp.into_iter().map(|(_, d)| d).collect(),
        unix: unix.into_iter().map(|(_, d)| d).collect(),
        password_file,
        min_scrape_interval_s: interval?,
        max_connections: max_connections?,
        // Rendered once the whole configuration is read.
        resolved: Default::default(),
    }))
}

/// The loopback rule, and ports shared with another door.
fn check_tcp_door(
    f: &mut Findings,
    path: &str,
    door: &ops::TcpDoor,
    all: &[(String, ops::TcpDoor)],
    block_has_operators: bool,
    mqtt_doors: Option<&[MqttDoor]>,
) -> bool {
    let Ok(address) = parse_address(&door.address) else {
        return true;
    };
    let mut clean = true;
    let certificate_required = door.tls.as_ref().is_some_and(|t| t.certificate_required);
    if !address.is_loopback()
        && door.password_file.is_none()
        && !block_has_operators
        && !certificate_required
    {
        f.key(
            &format!("{path}.address"),
            format!(
                "{:?} is reachable from other machines and nothing here authenticates a reader: set {BLOCK}.password_file or {path}.password_file, require client certificates with {path}.tls.client_ca_file (require_certificate: false does not count), or listen on 127.0.0.1",
                door.address
            ),
        );
        clean = false;
    }
    let earlier_ops = all
        .iter()
        .take_while(|(p, _)| p != path)
        .map(|(p, d)| (p.clone(), d.address.clone()));
    let mqtt = mqtt_doors.unwrap_or_default().iter().filter_map(|d| {
        let address = d.listen.address()?;
        Some((
            format!("broker.mqtt.listen.{} {:?}", d.kind(), d.name),
            address.to_string(),
        ))
    });
    for (other_path, other) in mqtt.chain(earlier_ops) {
        if parse_address(&other).is_ok_and(|other| clashes(&other, &address)) {
            f.key(
                &format!("{path}.address"),
                format!("{:?} needs a port the door at {other_path} ({other:?}) already takes; give one of them another port", door.address),
            );
            clean = false;
        }
    }
    clean
}

/// A kind's doors with the path each was written at: one mapping named
/// after the kind, or a list whose entries are named.
fn doors<T>(
    f: &mut Findings,
    listen_path: &str,
    listen: &Table<'_>,
    kind: &str,
    keys: &Keys,
    read: impl Fn(&mut Findings, &str, &Table<'_>) -> Option<T>,
) -> Option<Vec<(String, T)>>
where
    T: Named,
{
    let Some(value) = listen.get(kind) else {
        return Some(Vec::new());
    };
    let path = format!("{listen_path}.{kind}");
    let entries: Vec<(String, &Value, Option<&str>)> = match value {
        Value::Mapping(_) => vec![(path.clone(), value, Some(kind))],
        Value::Sequence(list) if !list.is_empty() => {
            let lone = (list.len() == 1).then_some(kind);
            list.iter()
                .enumerate()
                .map(|(i, entry)| (format!("{path}[{i}]"), entry, lone))
                .collect()
        }
        other => {
            f.value(
                &path,
                other,
                "a door is a block of keys, or a list of such blocks each with a name",
            );
            return None;
        }
    };
    let mut read_doors = Vec::new();
    let mut clean = true;
    for (entry_path, entry, default_name) in entries {
        let Some(t) = table(f, &entry_path, entry, keys) else {
            clean = false;
            continue;
        };
        if let Some(v) = t.get("allow_anonymous") {
            f.value(
                &format!("{entry_path}.allow_anonymous"),
                v,
                "the operations listener has no anonymous setting: a door without a password file already serves a reader with no name, on a socket or a loopback address; remove the key",
            );
            clean = false;
        }
        let name = door_name(
            f,
            &entry_path,
            t.get("name"),
            default_name,
            "unique among the operations doors",
        );
        match (read(f, &entry_path, &t), name) {
            (Some(mut door), Some(name)) => {
                door.set_name(name);
                read_doors.push((entry_path, door));
            }
            _ => clean = false,
        }
    }
    clean.then_some(read_doors)
}

/// A door type whose name is settled after its other keys.
trait Named {
    fn set_name(&mut self, name: String);
}

impl Named for ops::TcpDoor {
    fn set_name(&mut self, name: String) {
        self.name = name;
    }
}

impl Named for ops::UnixDoor {
    fn set_name(&mut self, name: String) {
        self.name = name;
    }
}

fn tcp_door(f: &mut Findings, path: &str, t: &Table<'_>) -> Option<ops::TcpDoor> {
    let address = door_address(
        f,
        path,
        t.get("address"),
        "this door has no address, and there is no default, because a port opened by a default is a port nobody chose; write address: such as 127.0.0.1:9090",
    )
    .map(|(_, address)| address.bind_text().to_string());
    let password_file = operators(f, &format!("{path}.password_file"), t.get("password_file"));
    let tls = match t.get("tls") {
        None => Some(None),
        Some(v) => door_tls(f, path, v).map(Some),
    };
    Some(ops::TcpDoor {
        name: String::new(),
        address: address?,
        password_file: password_file?,
        tls: tls?,
    })
}

/// A TCP door's `tls` block, its files read and checked now so that a
/// check refuses what a start would.
fn door_tls(f: &mut Findings, path: &str, value: &Value) -> Option<ops::DoorTls> {
    let tls_path = format!("{path}.tls");
    let settings = super::tls::parse(f, &tls_path, value, Some(path.to_string()))?;
    let certificate_required = settings.client_ca_file.is_some() && settings.require_certificate;
    match crate::net::tls::load(&settings) {
        Ok(loaded) => Some(ops::DoorTls {
            door: settings.door.clone(),
            certificate_required,
            cert_file: settings.cert_file.clone(),
            key_file: settings.key_file.clone(),
            client_ca_file: settings.client_ca_file.clone(),
            name_of: Arc::new(|der: &[u8]| {
                crate::net::tls::x509::read(der).name().map(str::to_string)
            }),
            config: loaded.config,
            read_again: Arc::new(move || {
                let loaded = crate::net::tls::load(&settings).map_err(|e| e.join("; "))?;
                let now_unix_s = crate::net::tls::now_unix_s();
                crate::net::tls::log_expiry(&settings, &loaded.leaf, now_unix_s);
                Ok(loaded.config)
            }),
        }),
        Err(errors) => {
            // Each names the door's key and its file.
            for error in errors {
                f.whole(error);
            }
            None
        }
    }
}

fn unix_door(f: &mut Findings, path: &str, t: &Table<'_>) -> Option<ops::UnixDoor> {
    let socket = sockets::path(f, path, t.get("path"), "/run/saguin/operations.sock");
    let mode = sockets::mode(f, path, t.get("mode"));
    let password_file = operators(f, &format!("{path}.password_file"), t.get("password_file"));
    let proxy_protocol = sockets::proxy_protocol(f, path, t.get("proxy_protocol"));
    Some(ops::UnixDoor {
        name: String::new(),
        path: socket?,
        mode: mode?,
        password_file: password_file?,
        proxy_protocol: proxy_protocol?,
    })
}

/// Reads an operators file; `Some(None)` when the key is absent.
fn operators(
    f: &mut Findings,
    path: &str,
    value: Option<&Value>,
) -> Option<Option<Arc<Operators>>> {
    let Some(value) = value else {
        return Some(None);
    };
    let file = absolute_file(f, path, value, "/etc/saguin/operations.passwd")?;
    match Operators::load(Path::new(&file), ROUTES) {
        Ok(operators) => Some(Some(Arc::new(operators))),
        Err(errors) => {
            for why in errors {
                f.value(path, value, format!("the file {why}"));
            }
            None
        }
    }
}

/// Connections served at once; as many more are answered `/health` alone.
fn max_connections(f: &mut Findings, value: Option<&Value>) -> Option<usize> {
    let rule = CountRule {
        min: 1,
        max: ops::MAX_MAX_CONNECTIONS as u64,
        allowed: "it is a whole number from 1 to 1024; omit the key for 16",
        below: "0 would serve nobody, /health included",
        none: "the listener's connections are bounded like everything else",
    };
    let path = format!("{BLOCK}.max_connections");
    let default = ops::DEFAULT_MAX_CONNECTIONS as u32;
    count_key(f, (path, value), default, rule).map(|n| n as usize)
}

fn min_scrape_interval(f: &mut Findings, value: Option<&Value>) -> Option<u32> {
    const PATH: &str = "broker.operations.min_scrape_interval";
    let Some(value) = value else {
        return Some(MIN_SCRAPE_INTERVAL_S);
    };
    let allowed =
        format!("it is a duration of {MIN_SCRAPE_INTERVAL_S}s or more, such as 60s or 5m");
    let ms = duration_ms(
        f,
        PATH,
        value,
        NoneRule::Refused("the metrics are always recomputed at some interval"),
        &allowed,
    )??;
    let seconds = whole_seconds(f, PATH, value, ms)?;
    if seconds < u64::from(MIN_SCRAPE_INTERVAL_S) {
        f.value(
            PATH,
            value,
            format!(
                "is below the floor of {MIN_SCRAPE_INTERVAL_S}s; a shorter interval is refused rather than quietly raised, so the graphs' resolution is the one written. Write {MIN_SCRAPE_INTERVAL_S}s or more"
            ),
        );
        return None;
    }
    let Ok(seconds) = u32::try_from(seconds) else {
        f.value(PATH, value, format!("too large; {allowed}"));
        return None;
    };
    Some(seconds)
}
