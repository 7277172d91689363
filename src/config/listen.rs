//! `broker.mqtt.listen`: the doors clients connect through.
//!
//! This version opens TCP doors only. A kind with one door may be written
//! as a single mapping, named after its kind; several doors are a list, and
//! each then carries a name of its own. Before anything is bound, every
//! address is checked for its syntax and every pair of doors for a shared
//! name or a port the kernel would refuse to give twice.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_yaml::Value;

use super::authentication::{self, AuthenticationKeys};
use super::findings::{show, Findings};
use super::table::{table, Keys};
use crate::net::tls::TlsSettings;

/// One TCP listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpDoor {
    /// Unique across every MQTT door; `tcp` for a door written as a single
    /// mapping without a name.
    pub name: String,
    /// `host:port`, IPv6 in brackets, ready for `ToSocketAddrs` or
    /// `async_net::TcpListener::bind`. The host is kept as written except
    /// that an empty host (`:1883`, every interface) is given as `0.0.0.0`,
    /// and the port is written as a plain decimal number.
    pub address: String,
    /// The door's own `password_file` and `allow_anonymous`, as written.
    pub authentication: AuthenticationKeys,
    /// Its `tls` block; `None` for a plain door.
    pub tls: Option<TlsSettings>,
}

/// The name a door takes when the file gives it none.
pub const DEFAULT_TCP_DOOR_NAME: &str = "tcp";

/// The address of the door opened when no listener is written.
pub const DEFAULT_TCP_ADDRESS: &str = "0.0.0.0:1883";

const LISTEN_KEYS: Keys = Keys {
    supported: &["tcp"],
    not_yet: &["ws", "unix"],
};

const DOOR_KEYS: Keys = Keys {
    supported: &["name", "address", "password_file", "allow_anonymous", "tls"],
    not_yet: &[],
};

/// Reads `broker.mqtt.listen`. With no listener written at all, one `tcp`
/// door on every interface at port 1883.
pub(super) fn parse(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<Vec<TcpDoor>> {
    let Some(value) = value else {
        return Some(default_doors());
    };
    let t = table(f, path, value, &LISTEN_KEYS)?;
    let Some(tcp) = t.get("tcp") else {
        // Nothing written, or only keys already reported: a listener of
        // another kind turns the default off, so it is not added then.
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
    };
    let tcp_path = format!("{path}.tcp");
    let doors: Vec<Option<Door>> = match tcp {
        Value::Mapping(_) => vec![door(f, &tcp_path, tcp, Some(DEFAULT_TCP_DOOR_NAME))],
        Value::Sequence(list) if list.is_empty() => {
            f.value(
                &tcp_path,
                tcp,
                format!("an empty list opens no door; list at least one, or remove {path} for one door on {DEFAULT_TCP_ADDRESS}"),
            );
            return None;
        }
        Value::Sequence(list) => {
            // A lone door may go unnamed, as the mapping form may; among
            // several, a name is what tells them apart.
            let default_name = (list.len() == 1).then_some(DEFAULT_TCP_DOOR_NAME);
            list.iter()
                .enumerate()
                .map(|(i, entry)| door(f, &format!("{tcp_path}[{i}]"), entry, default_name))
                .collect()
        }
        Value::Null => {
            f.key(
                &tcp_path,
                "a door with no address is a mistake rather than a default; write address: 0.0.0.0:1883 under it",
            );
            return None;
        }
        other => {
            f.value(
                &tcp_path,
                other,
                "a door is a block holding an address, with address: on the line below tcp:, or a list of such blocks each with a name",
            );
            return None;
        }
    };
    // The cross checks run over whatever each door got right, so a door
    // with a bad address still has its name compared, and the other way
    // round.
    let mut clean = doors.iter().all(|d| {
        d.as_ref()
            .is_some_and(|d| d.name.is_some() && d.address.is_some() && d.tls.is_some())
    });
    let doors: Vec<Door> = doors.into_iter().flatten().collect();
    for (j, later) in doors.iter().enumerate() {
        let earlier = &doors[..j];
        if let Some(name) = &later.name {
            if let Some(first) = earlier.iter().find(|d| d.name.as_ref() == Some(name)) {
                f.key(
                    &format!("{}.name", later.path),
                    format!(
                        "{name:?} is already the name of the door at {}{}; every MQTT door needs a name of its own",
                        first.path,
                        first.quoted_address()
                    ),
                );
                clean = false;
            }
        }
        if let Some((written, address)) = &later.address {
            let clash = earlier.iter().find(|d| {
                d.address
                    .as_ref()
                    .is_some_and(|(_, other)| clashes(other, address))
            });
            if let Some(first) = clash {
                f.key(
                    &format!("{}.address", later.path),
                    format!(
                        "{written:?} needs port {}, which the door at {}{} already takes; two doors cannot share a port where the hosts are equal or either is a wildcard, so give one of them another port",
                        address.port,
                        first.path,
                        first.quoted_address()
                    ),
                );
                clean = false;
            }
        }
    }
    if !clean {
        return None;
    }
    doors
        .into_iter()
        .map(|d| {
            Some(TcpDoor {
                name: d.name?,
                address: d.address?.1.bind,
                authentication: d.authentication?,
                tls: d.tls?,
            })
        })
        .collect()
}

/// What messages about the door's files call it: the kind alone for the
/// door a single mapping names after its kind, the kind and the name
/// otherwise.
fn door_label(name: &str) -> String {
    if name == DEFAULT_TCP_DOOR_NAME {
        "broker.mqtt.listen.tcp".to_string()
    } else {
        format!("broker.mqtt.listen.tcp[{name}]")
    }
}

fn default_doors() -> Vec<TcpDoor> {
    vec![TcpDoor {
        name: DEFAULT_TCP_DOOR_NAME.to_string(),
        address: DEFAULT_TCP_ADDRESS.to_string(),
        authentication: AuthenticationKeys::default(),
        tls: None,
    }]
}

/// A door as read, kept with where it was written for the cross checks.
/// A part that was refused is `None`, its finding already recorded.
struct Door {
    path: String,
    name: Option<String>,
    /// The address as written, and as read.
    address: Option<(String, Address)>,
    authentication: Option<AuthenticationKeys>,
    /// Its `tls` block, `Some(None)` for a plain door.
    tls: Option<Option<TlsSettings>>,
}

impl Door {
    /// ` ("127.0.0.1:1883")`, or nothing for a door whose address was
    /// refused.
    fn quoted_address(&self) -> String {
        match &self.address {
            Some((written, _)) => format!(" ({written:?})"),
            None => String::new(),
        }
    }
}

fn door(f: &mut Findings, path: &str, value: &Value, default_name: Option<&str>) -> Option<Door> {
    let t = table(f, path, value, &DOOR_KEYS)?;
    let name_path = format!("{path}.name");
    let name = match (t.get("name"), default_name) {
        (None, Some(default)) => Some(default.to_string()),
        (None, None) => {
            f.key(
                path,
                "a door in a list of several needs a name, unique across every MQTT door, such as name: local",
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
    };
    let address = door_address(
        f,
        path,
        t.get("address"),
        "this door has no address, and a door with no address is a mistake rather than a default; write address: with host:port, such as 0.0.0.0:1883",
    );
    let tls = match t.get("tls") {
        None => Some(None),
        Some(v) => {
            let label = name.as_deref().map(door_label);
            super::tls::parse(f, &format!("{path}.tls"), v, label).map(Some)
        }
    };
    Some(Door {
        path: path.to_string(),
        name,
        address,
        authentication: authentication::keys(f, path, &t),
        tls,
    })
}

/// Reads the `address` of the door at `path`, as written and as read;
/// `missing` is the finding when there is none.
pub(super) fn door_address(
    f: &mut Findings,
    path: &str,
    value: Option<&Value>,
    missing: &str,
) -> Option<(String, Address)> {
    let address_path = format!("{path}.address");
    match value {
        None => {
            f.key(path, missing);
            None
        }
        Some(v @ Value::String(text)) => match parse_address(text) {
            Ok(address) => Some((text.clone(), address)),
            Err(why) => {
                f.value(&address_path, v, why);
                None
            }
        },
        Some(v) => {
            f.value(&address_path, v, ADDRESS_FORM);
            None
        }
    }
}

/// A door's address, read for binding and for comparing with others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Address {
    host: Host,
    port: u16,
    /// What to hand the socket layer.
    bind: String,
}

impl Address {
    /// Whether only this machine can reach it: a loopback IP, or the name
    /// `localhost`.
    pub(super) fn is_loopback(&self) -> bool {
        match &self.host {
            Host::Ip { ip, .. } => ip.is_loopback(),
            Host::Name(name) => name.eq_ignore_ascii_case("localhost"),
            Host::Any => false,
        }
    }

    /// What to hand the socket layer.
    pub(super) fn bind_text(&self) -> &str {
        &self.bind
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// No host written: every interface.
    Any,
    /// An IP literal, IPv4-mapped IPv6 read as IPv4. The zone is kept only
    /// on link-local addresses, the one place two zones are two sockets.
    Ip { ip: IpAddr, zone: Option<u32> },
    /// A host name, not resolved until the bind.
    Name(String),
}

impl Host {
    fn is_wildcard(&self) -> bool {
        match self {
            Host::Any => true,
            Host::Ip { ip, .. } => ip.is_unspecified(),
            Host::Name(_) => false,
        }
    }

    fn same_as(&self, other: &Host) -> bool {
        match (self, other) {
            (Host::Any, Host::Any) => true,
            (Host::Ip { ip: a, zone: za }, Host::Ip { ip: b, zone: zb }) => a == b && za == zb,
            (Host::Name(a), Host::Name(b)) => a.eq_ignore_ascii_case(b),
            _ => false,
        }
    }
}

/// Whether the kernel would refuse to bind both: the same port, not 0 (the
/// kernel gives each a port of its own), and hosts that are equal or of
/// which either is a wildcard. Host names are compared as written.
pub(super) fn clashes(a: &Address, b: &Address) -> bool {
    a.port != 0
        && a.port == b.port
        && (a.host.is_wildcard() || b.host.is_wildcard() || a.host.same_as(&b.host))
}

const ADDRESS_FORM: &str =
    "an address is host:port, such as 0.0.0.0:1883, [::1]:1883 or :1883 for every interface";

/// Reads `host:port`, IPv6 in brackets.
pub(super) fn parse_address(text: &str) -> Result<Address, String> {
    if text.is_empty() {
        return Err(ADDRESS_FORM.to_string());
    }
    if text.chars().any(char::is_whitespace) {
        return Err(format!("an address holds no spaces; {ADDRESS_FORM}"));
    }
    let (host_text, port_text, bracketed) = if let Some(rest) = text.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return Err("an IPv6 address opened with [ is never closed with ]".to_string());
        };
        let Some(port) = after.strip_prefix(':') else {
            return Err(if after.is_empty() {
                format!("no port: write it as [{inside}]:1883")
            } else {
                ADDRESS_FORM.to_string()
            });
        };
        (inside, port, true)
    } else {
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(format!(
                "no port: write it as host:port, such as {text}:1883"
            ));
        };
        if host.contains(':') {
            return Err("an IPv6 address is written in brackets, such as [::1]:1883".to_string());
        }
        if host.contains('[') || host.contains(']') || port.contains(']') {
            return Err(ADDRESS_FORM.to_string());
        }
        (host, port, false)
    };
    let port = parse_port(port_text)?;
    let host = if bracketed {
        parse_ipv6(host_text)?
    } else if host_text.is_empty() {
        Host::Any
    } else if let Ok(v4) = host_text.parse::<Ipv4Addr>() {
        check_ipv4(v4)?;
        Host::Ip {
            ip: IpAddr::V4(v4),
            zone: None,
        }
    } else {
        parse_host_name(host_text)?
    };
    let bind = match host {
        // Every interface. IPv4's wildcard binds everywhere a gateway has
        // IPv4, including kernels built without IPv6.
        Host::Any => format!("0.0.0.0:{port}"),
        _ if bracketed => format!("[{host_text}]:{port}"),
        _ => format!("{host_text}:{port}"),
    };
    Ok(Address { host, port, bind })
}

fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() {
        return Err("no port after the colon: write a number from 0 to 65535".to_string());
    }
    let digits = text.strip_prefix('+').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(if text.bytes().any(|b| b.is_ascii_alphabetic()) {
            service_name_refusal(text)
        } else {
            format!("{text:?} is not a port; a port is a number from 0 to 65535")
        });
    }
    let trimmed = digits.trim_start_matches('0');
    let port = if trimmed.is_empty() {
        Some(0)
    } else if trimmed.len() > 5 {
        None
    } else {
        trimmed
            .parse::<u32>()
            .ok()
            .and_then(|p| u16::try_from(p).ok())
    };
    port.ok_or_else(|| format!("port {text} is above 65535"))
}

/// Why a service name is not read as a port, and the number to write:
/// `/etc/services` differs between the machine a configuration is checked
/// on and the gateway it runs on (an OpenWrt image may carry none), so the
/// same file would bind differently, or not at all (rfcs/0001).
fn service_name_refusal(name: &str) -> String {
    let known = match name {
        "mqtt" => Some(1883),
        "secure-mqtt" | "mqtts" => Some(8883),
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    let why = "a port is written as a number here, not a service name, since /etc/services differs between the machine that checks a configuration and the gateway that runs it";
    match known {
        Some(port) => format!("{why}: write {port} for {name:?}"),
        None => format!("{why}: write {name:?}'s port as a number from 0 to 65535"),
    }
}

fn parse_ipv6(inside: &str) -> Result<Host, String> {
    let (literal, zone) = match inside.split_once('%') {
        Some((literal, zone)) => (literal, Some(zone)),
        None => (inside, None),
    };
    let Ok(v6) = literal.parse::<Ipv6Addr>() else {
        if literal.parse::<Ipv4Addr>().is_ok() && zone.is_none() {
            return Err(format!(
                "brackets are for IPv6 addresses; write {literal}:port without them"
            ));
        }
        return Err(format!("{literal:?} in brackets is not an IPv6 address"));
    };
    if v6.is_multicast() {
        return Err("a multicast address cannot take connections; write the address of an interface, or [::] for every one".to_string());
    }
    if let Some(v4) = v6.to_ipv4_mapped() {
        check_ipv4(v4)?;
        return match zone {
            None => Ok(Host::Ip {
                ip: IpAddr::V4(v4),
                zone: None,
            }),
            Some(_) => {
                Err("a zone belongs only on an IPv6 address, not an IPv4-mapped one".to_string())
            }
        };
    }
    let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
    let zone = match zone {
        None if link_local => {
            return Err("a link-local address needs a zone naming its interface, such as [fe80::1%2]:1883".to_string())
        }
        None => None,
        Some("") => return Err("the zone after % is empty; write the interface's index, such as %2".to_string()),
        Some(z) => match z.parse::<u32>() {
            Ok(index) => Some(index),
            Err(_) => {
                return Err(format!(
                    "this version takes a zone as an interface index, such as %2 (listed by `ip link`), not a name such as %{z}"
                ))
            }
        },
    };
    Ok(Host::Ip {
        ip: IpAddr::V6(v6),
        zone: zone.filter(|_| link_local),
    })
}

fn check_ipv4(v4: Ipv4Addr) -> Result<(), String> {
    if v4.is_multicast() || v4.is_broadcast() {
        return Err(format!(
            "{v4} cannot take connections; write the address of an interface, or 0.0.0.0 for every one"
        ));
    }
    Ok(())
}

/// An RFC 1123 host name: dot-separated labels of letters, digits and
/// `-`, none empty, longer than 63 bytes or starting or ending with `-`.
fn parse_host_name(text: &str) -> Result<Host, String> {
    let refuse = || {
        Err(format!(
            "{text:?} is neither an IP address nor a host name; {ADDRESS_FORM}"
        ))
    };
    if text.len() > 253 {
        return refuse();
    }
    let labels_ok = text.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    // All digits and dots is a mistyped IPv4 address, not a name.
    let looks_numeric = text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !labels_ok || looks_numeric {
        return refuse();
    }
    Ok(Host::Name(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(text: &str) -> String {
        parse_address(text).unwrap().bind
    }

    fn refusal(text: &str) -> String {
        parse_address(text).unwrap_err()
    }

    #[test]
    fn addresses_are_read_and_written_for_the_socket_layer() {
        assert_eq!(bind("0.0.0.0:1883"), "0.0.0.0:1883");
        assert_eq!(bind(":1883"), "0.0.0.0:1883");
        assert_eq!(bind("[::1]:0"), "[::1]:0");
        assert_eq!(bind("[::]:8883"), "[::]:8883");
        assert_eq!(bind("localhost:01883"), "localhost:1883");
        assert_eq!(bind("127.0.0.1:+32010"), "127.0.0.1:32010");
        assert_eq!(bind("[fe80::1%2]:1883"), "[fe80::1%2]:1883");
        assert_eq!(bind("gw-1.example.net:65535"), "gw-1.example.net:65535");
    }

    #[test]
    fn every_bound_address_is_one_the_standard_library_reads() {
        use std::net::SocketAddr;
        for text in [
            "0.0.0.0:1883",
            ":1883",
            "[::1]:0",
            "127.0.0.1:+32010",
            "[fe80::1%2]:1",
        ] {
            let b = bind(text);
            assert!(b.parse::<SocketAddr>().is_ok(), "{text} -> {b}");
        }
    }

    #[test]
    fn malformed_addresses_are_refused_with_a_reason() {
        let cases = [
            ("", "host:port"),
            (
                "0.0.0.0",
                "no port: write it as host:port, such as 0.0.0.0:1883",
            ),
            ("::1:1883", "in brackets"),
            ("[::1:1883", "never closed"),
            ("[::1]", "no port: write it as [::1]:1883"),
            ("[::1]1883", "host:port"),
            ("[1.2.3.4]:1883", "brackets are for IPv6"),
            ("[zz::1]:1883", "not an IPv6 address"),
            ("0.0.0.0:", "no port after the colon"),
            ("0.0.0.0:65536", "above 65535"),
            ("0.0.0.0:9999999999", "above 65535"),
            ("0.0.0.0:mqtt", "not a service name, since /etc/services differs between the machine that checks a configuration and the gateway that runs it: write 1883 for \"mqtt\""),
            ("0.0.0.0:ipp", "write \"ipp\"'s port as a number"),
            ("0.0.0.0:-1", "not a port"),
            ("0.0.0.0 :1883", "no spaces"),
            ("[ff02::1]:1883", "multicast"),
            ("224.0.0.1:1883", "cannot take connections"),
            ("[fe80::1]:1883", "link-local address needs a zone"),
            ("[fe80::1%]:1883", "zone after % is empty"),
            ("[fe80::1%eth0]:1883", "interface index"),
            ("256.1.1.1:1883", "neither an IP address nor a host name"),
            ("bad_host:1883", "neither an IP address nor a host name"),
            ("-bad.example:1883", "neither an IP address nor a host name"),
        ];
        for (text, expected) in cases {
            let e = refusal(text);
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }

    #[test]
    fn ports_clash_only_where_the_kernel_would_refuse() {
        let a = |t: &str| parse_address(t).unwrap();
        // Equal hosts.
        assert!(clashes(&a("127.0.0.1:1883"), &a("127.0.0.1:1883")));
        // Either a wildcard.
        assert!(clashes(&a("0.0.0.0:1883"), &a("127.0.0.1:1883")));
        assert!(clashes(&a("127.0.0.1:1883"), &a(":1883")));
        assert!(clashes(&a("[::]:1883"), &a("10.0.0.1:1883")));
        // Compared as addresses, not as text.
        assert!(clashes(&a("[::ffff:127.0.0.1]:1883"), &a("127.0.0.1:1883")));
        assert!(clashes(&a("[::ffff:0.0.0.0]:1883"), &a("10.0.0.1:1883")));
        assert!(clashes(&a("LOCALHOST:1883"), &a("localhost:1883")));
        // A zone matters only on link-local addresses.
        assert!(clashes(&a("[fe80::1%2]:1883"), &a("[fe80::1%2]:1883")));
        assert!(!clashes(&a("[fe80::1%2]:1883"), &a("[fe80::1%3]:1883")));
        assert!(clashes(&a("[::1%2]:1883"), &a("[::1%3]:1883")));
        // Different hosts, different ports, or port 0.
        assert!(!clashes(&a("127.0.0.1:1883"), &a("10.0.0.1:1883")));
        assert!(!clashes(&a("0.0.0.0:1883"), &a("0.0.0.0:8883")));
        assert!(!clashes(&a("0.0.0.0:0"), &a("0.0.0.0:0")));
        // A name is not resolved, so it clashes with an IP only at the bind.
        assert!(!clashes(&a("localhost:1883"), &a("127.0.0.1:1883")));
        assert!(clashes(&a("localhost:1883"), &a("0.0.0.0:1883")));
    }
}
