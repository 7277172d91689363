//! `broker.mqtt.listen`: the doors clients connect through, of three
//! kinds: `tcp` (MQTT on a port, TLS if it has a `tls` block), `ws` (MQTT
//! over WebSocket on a port, `wss` with a `tls` block) and `unix` (MQTT on
//! a Unix socket).
//!
//! A kind with one door may be written as a single mapping, named after
//! its kind; several doors are a list, and each then carries a name of its
//! own, unique across every MQTT door. Before anything is bound, every
//! address is checked for its syntax, and every pair of doors for a shared
//! name, a port the kernel would refuse to give twice or one socket path.

use std::path::PathBuf;

use serde_yaml::Value;

use super::address::{clashes, door_address, Address};
use super::authentication::{self, AuthenticationKeys};
use super::findings::{show, Findings};
use super::sockets;
use super::table::{table, Keys, Table};
use crate::net::tls::TlsSettings;
use crate::net::websocket::{origin_key, Origins};
use crate::net::{door_label, Listen};

/// One MQTT door.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttDoor {
    /// Unique across every MQTT door; the kind's word (`tcp`, `ws`,
    /// `unix`) for a door written as a single mapping without a name.
    pub name: String,
    /// What it listens on. A TCP address is `host:port`, IPv6 in brackets,
    /// ready for `async_net::TcpListener::bind`: the host as written
    /// except that an empty one (`:1883`, every interface) is `0.0.0.0`,
    /// and the port as a plain decimal number.
    pub listen: Listen,
    /// The door's own `password_file` and `allow_anonymous`, as written.
    pub authentication: AuthenticationKeys,
    /// Its `tls` block; `None` for a plain door, and always for a socket.
    pub tls: Option<TlsSettings>,
}

impl MqttDoor {
    /// The kind's word, as the file spells it.
    pub fn kind(&self) -> &'static str {
        self.listen.kind()
    }

    /// What messages about the door call it, as `net::Door::label` does.
    pub fn label(&self) -> String {
        door_label(self.kind(), &self.name)
    }
}

/// The name a door takes when the file gives it none.
pub const DEFAULT_TCP_DOOR_NAME: &str = "tcp";

/// The address of the door opened when no listener is written.
pub const DEFAULT_TCP_ADDRESS: &str = "0.0.0.0:1883";

const LISTEN_KEYS: Keys = Keys {
    supported: &["tcp", "ws", "unix"],
    not_yet: &[],
};

pub(super) const TCP_KEYS: Keys = Keys {
    supported: &["name", "address", "password_file", "allow_anonymous", "tls"],
    not_yet: &[],
};

const WS_KEYS: Keys = Keys {
    supported: &[
        "name",
        "address",
        "password_file",
        "allow_anonymous",
        "tls",
        "same_origin",
        "allowed_origins",
    ],
    not_yet: &[],
};

pub(super) const UNIX_KEYS: Keys = Keys {
    supported: &[
        "name",
        "path",
        "mode",
        "password_file",
        "allow_anonymous",
        "proxy_protocol",
    ],
    not_yet: &[],
};

/// Each kind: its word, its keys, and the key a door of it is written
/// with, with an example.
const KINDS: [(&str, &Keys, (&str, &str)); 3] = [
    ("tcp", &TCP_KEYS, ("address", "0.0.0.0:1883")),
    ("ws", &WS_KEYS, ("address", "0.0.0.0:8083")),
    ("unix", &UNIX_KEYS, ("path", "/run/saguin/saguin.sock")),
];

/// Reads `broker.mqtt.listen`. With no listener written at all, one `tcp`
/// door on every interface at port 1883; a door of any kind written turns
/// that default off.
pub(super) fn parse(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<Vec<MqttDoor>> {
    let Some(value) = value else {
        return Some(default_doors());
    };
    let t = table(f, path, value, &LISTEN_KEYS)?;
    if KINDS.iter().all(|(kind, _, _)| t.get(kind).is_none()) {
        // Nothing written, or only keys already reported.
        let nothing_written = match value {
            Value::Null => true,
            Value::Mapping(m) => m.is_empty(),
            _ => false,
        };
        return Some(if nothing_written {
            default_doors()
        } else {
            Vec::new()
        });
    }
    let mut clean = true;
    let mut doors = Vec::new();
    for (kind, keys, example) in KINDS {
        let Some(written) = t.get(kind) else {
            continue;
        };
        match doors_of_kind(f, path, kind, keys, example, written) {
            Some(read) => doors.extend(read),
            None => clean = false,
        }
    }
    // The cross checks run over whatever each door got right, so a door
    // with a bad address still has its name compared, and the other way
    // round.
    clean &= doors.iter().all(|d| d.door.is_some());
    clean &= cross_check(f, &doors);
    if !clean {
        return None;
    }
    doors.into_iter().map(|d| d.door).collect()
}

/// The doors of one kind: a single mapping, or a list.
fn doors_of_kind(
    f: &mut Findings,
    path: &str,
    kind: &'static str,
    keys: &Keys,
    (place_key, example): (&str, &str),
    value: &Value,
) -> Option<Vec<Read>> {
    let kind_path = format!("{path}.{kind}");
    match value {
        Value::Mapping(_) => Some(vec![door(f, &kind_path, kind, keys, value, Some(kind))?]),
        Value::Sequence(list) if list.is_empty() => {
            f.value(
                &kind_path,
                value,
                format!("an empty list opens no door; list at least one, or remove {kind_path}"),
            );
            None
        }
        Value::Sequence(list) => {
            // A lone door may go unnamed, as the mapping form may; among
            // several, a name is what tells them apart.
            let default_name = (list.len() == 1).then_some(kind);
            let mut read = Vec::new();
            let mut clean = true;
            for (i, entry) in list.iter().enumerate() {
                let entry_path = format!("{kind_path}[{i}]");
                match door(f, &entry_path, kind, keys, entry, default_name) {
                    Some(door) => read.push(door),
                    None => clean = false,
                }
            }
            // The others are still compared; the refused one is reported.
            if !clean {
                read.push(Read::refused(kind_path));
            }
            Some(read)
        }
        Value::Null => {
            f.key(
                &kind_path,
                format!("a door with no {place_key} is a mistake rather than a default; write {place_key}: {example} under it"),
            );
            None
        }
        other => {
            f.value(
                &kind_path,
                other,
                format!("a door is a block holding {place_key}: {example}, with {place_key}: on the line below {kind}:, or a list of such blocks each with a name"),
            );
            None
        }
    }
}

/// Names shared by two doors, ports two doors would both take and socket
/// paths two doors name; each is a finding. False when any was found.
fn cross_check(f: &mut Findings, doors: &[Read]) -> bool {
    let mut clean = true;
    for (j, later) in doors.iter().enumerate() {
        let earlier = &doors[..j];
        if let Some(name) = &later.name {
            if let Some(first) = earlier.iter().find(|d| d.name.as_ref() == Some(name)) {
                f.key(
                    &format!("{}.name", later.path),
                    format!(
                        "{name:?} is already the name of the door at {}{}; every MQTT door needs a name of its own",
                        first.path,
                        first.quoted_place()
                    ),
                );
                clean = false;
            }
        }
        match &later.place {
            Some(Place::Port(written, address)) => {
                let clash = earlier.iter().find(
                    |d| matches!(&d.place, Some(Place::Port(_, other)) if clashes(other, address)),
                );
                if let Some(first) = clash {
                    f.key(
                        &format!("{}.address", later.path),
                        format!(
                            "{written:?} needs port {}, which the door at {}{} already takes; two doors cannot share a port where the hosts are equal or either is a wildcard, so give one of them another port",
                            address.port(),
                            first.path,
                            first.quoted_place()
                        ),
                    );
                    clean = false;
                }
            }
            Some(Place::Socket(socket)) => {
                let clash = earlier.iter().find(|d| {
                    matches!(&d.place, Some(Place::Socket(other)) if sockets::same_socket(other, socket))
                });
                if let Some(first) = clash {
                    f.key(
                        &format!("{}.path", later.path),
                        format!(
                            "{} is already the socket of the door at {}; give each door a path of its own",
                            socket.display(),
                            first.path
                        ),
                    );
                    clean = false;
                }
            }
            None => {}
        }
    }
    clean
}

fn default_doors() -> Vec<MqttDoor> {
    vec![MqttDoor {
        name: DEFAULT_TCP_DOOR_NAME.to_string(),
        listen: Listen::Tcp {
            address: DEFAULT_TCP_ADDRESS.to_string(),
        },
        authentication: AuthenticationKeys::default(),
        tls: None,
    }]
}

/// Where a door listens, for the cross checks.
enum Place {
    /// The address as written, and as read.
    Port(String, Address),
    Socket(PathBuf),
}

/// A door as read, kept with where it was written for the cross checks.
/// A part that was refused is `None`, its finding already recorded.
struct Read {
    path: String,
    name: Option<String>,
    place: Option<Place>,
    /// The whole door, when every part of it was read.
    door: Option<MqttDoor>,
}

impl Read {
    /// A door that could not be read at all.
    fn refused(path: String) -> Read {
        Read {
            path,
            name: None,
            place: None,
            door: None,
        }
    }

    /// ` ("127.0.0.1:1883")`, or nothing for a door whose place was
    /// refused.
    fn quoted_place(&self) -> String {
        match &self.place {
            Some(Place::Port(written, _)) => format!(" ({written:?})"),
            Some(Place::Socket(path)) => format!(" ({:?})", path.display().to_string()),
            None => String::new(),
        }
    }
}

fn door(
    f: &mut Findings,
    path: &str,
    kind: &'static str,
    keys: &Keys,
    value: &Value,
    default_name: Option<&str>,
) -> Option<Read> {
    let t = table(f, path, value, keys)?;
    let name = door_name(
        f,
        path,
        t.get("name"),
        default_name,
        "unique across every MQTT door",
    );
    let authentication = authentication::keys(f, path, &t);
    let (place, listen, tls) = match kind {
        "unix" => {
            let socket = sockets::path(f, path, t.get("path"), "/run/saguin/saguin.sock");
            let mode = sockets::mode(f, path, t.get("mode"));
            let proxy_protocol = sockets::proxy_protocol(f, path, t.get("proxy_protocol"));
            let listen = match (&socket, mode, proxy_protocol) {
                (Some(socket), Some(mode), Some(proxy_protocol)) => Some(Listen::Unix {
                    path: socket.clone(),
                    mode,
                    proxy_protocol,
                }),
                _ => None,
            };
            (socket.map(Place::Socket), listen, Some(None))
        }
        _ => {
            let address = door_address(
                f,
                path,
                t.get("address"),
                "this door has no address, and a door with no address is a mistake rather than a default; write address: with host:port, such as 0.0.0.0:1883",
            );
            let tls = match t.get("tls") {
                None => Some(None),
                Some(v) => {
                    let label = name.as_deref().map(|name| door_label(kind, name));
                    super::tls::parse(f, &format!("{path}.tls"), v, label).map(Some)
                }
            };
            if let Some(Some(settings)) = &tls {
                f.named.door_tls.push(settings.clone());
            }
            let origins = match kind {
                "ws" => origins(f, path, &t),
                _ => Some(Origins::default()),
            };
            let listen = match (&address, origins) {
                (Some((_, address)), Some(origins)) => {
                    let address = address.bind_text().to_string();
                    Some(match kind {
                        "ws" => Listen::WebSocket { address, origins },
                        _ => Listen::Tcp { address },
                    })
                }
                _ => None,
            };
            (address.map(|(w, a)| Place::Port(w, a)), listen, tls)
        }
    };
    let door = match (&name, listen, authentication, tls) {
        (Some(name), Some(listen), Some(authentication), Some(tls)) => Some(MqttDoor {
            name: name.clone(),
            listen,
            authentication,
            tls,
        }),
        _ => None,
    };
    Some(Read {
        path: path.to_string(),
        name,
        place,
        door,
    })
}

/// A door's `name`, `default_name` when it writes none (a lone door, named
/// after its kind); `unique` says among which doors it must be.
pub(super) fn door_name(
    f: &mut Findings,
    path: &str,
    value: Option<&Value>,
    default_name: Option<&str>,
    unique: &str,
) -> Option<String> {
    let name_path = format!("{path}.name");
    match (value, default_name) {
        (None, Some(default)) => Some(default.to_string()),
        (None, None) => {
            f.key(
                path,
                format!("a door in a list of several needs a name, {unique}, such as name: local"),
            );
            None
        }
        (Some(v @ Value::String(s)), _)
            if s.trim().is_empty() || s.chars().any(char::is_control) =>
        {
            f.value(
                &name_path,
                v,
                "a door's name is text that is not blank and holds no control characters, such as local",
            );
            None
        }
        (Some(Value::String(s)), _) => Some(s.clone()),
        (Some(v), _) => {
            f.value(
                &name_path,
                v,
                format!(
                    "a door's name is text: write it in quotes, such as name: \"{}\"",
                    show(v)
                ),
            );
            None
        }
    }
}

/// A `ws` door's `same_origin` (default `true`) and `allowed_origins`
/// (default empty): which web pages may open it.
fn origins(f: &mut Findings, path: &str, t: &Table<'_>) -> Option<Origins> {
    let same_origin = match t.get("same_origin") {
        None => Some(true),
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            f.value(
                &format!("{path}.same_origin"),
                v,
                "it is true (a page must come from this door's own scheme, host and port) or false",
            );
            None
        }
    };
    let list_path = format!("{path}.allowed_origins");
    let allowed = match t.get("allowed_origins") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Sequence(entries)) => {
            let mut allowed = Vec::new();
            let mut clean = true;
            for (i, entry) in entries.iter().enumerate() {
                let entry_path = format!("{list_path}[{i}]");
                match entry {
                    Value::String(text) if text == "null" => {
                        f.value(
                            &entry_path,
                            entry,
                            "Origin: null cannot be listed: a sandboxed frame on any site sends it",
                        );
                        clean = false;
                    }
                    Value::String(text) => match origin_key(text) {
                        Ok(_) => allowed.push(text.clone()),
                        Err(why) => {
                            f.value(&entry_path, entry, why);
                            clean = false;
                        }
                    },
                    other => {
                        f.value(
                            &entry_path,
                            other,
                            "an origin is text, such as https://dashboard.example.com",
                        );
                        clean = false;
                    }
                }
            }
            clean.then_some(allowed)
        }
        Some(v) => {
            f.value(
                &list_path,
                v,
                "it is a list of origins, such as [https://dashboard.example.com]",
            );
            None
        }
    };
    Some(Origins::new(same_origin?, allowed?))
}
