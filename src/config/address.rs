//! A TCP door's `address`: read as `host:port`, IPv6 in brackets, and
//! compared with another door's for a port the kernel would refuse to give
//! twice.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_yaml::Value;

use super::findings::Findings;

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

    pub(super) fn port(&self) -> u16 {
        self.port
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
            format!("service names such as {text:?} are not supported by this version; write the port as a number from 0 to 65535")
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
            ("0.0.0.0:mqtt", "service names"),
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
