//! MQTT over WebSocket (RFC 6455), on `ws` doors and to `ws://` and
//! `wss://` bridge peers: the framing of our own over `httparse` and
//! ring's SHA-1, rather than a WebSocket crate (rfcs/0017).
//!
//! - [`frame`]: reading frames in place and writing their headers, sans-IO;
//! - [`handshake`]: the HTTP/1.1 upgrade, server and client side, sans-IO;
//! - [`stream`]: a byte stream of MQTT over a framed one, for the shell.
//!
//! Which web pages a door admits is [`Origins`], asked before the upgrade.

pub mod frame;
pub mod handshake;
pub mod stream;

pub use stream::WsStream;

/// Which web pages may open a door: a browser names the page's origin in
/// `Origin`, and a client that is not a browser sends none and is not
/// asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origins {
    /// The page's scheme, host and port must be the door's own: `https`
    /// on a TLS door, and the host and port the request names.
    pub same_origin: bool,
    /// When not empty, the page's origin must be one of these, each
    /// `scheme://host:port` with its port written out.
    allowed: Vec<String>,
}

impl Default for Origins {
    fn default() -> Origins {
        Origins::new(true, Vec::new())
    }
}

impl Origins {
    /// `allowed` as written; each must be an origin ([`origin_key`]
    /// checked it when the configuration was read).
    pub fn new(same_origin: bool, allowed: Vec<String>) -> Origins {
        let allowed = allowed
            .iter()
            .filter_map(|entry| origin_key(entry).ok())
            .collect();
        Origins {
            same_origin,
            allowed,
        }
    }

    /// The allowed origins, as compared.
    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }

    /// Whether a request whose `Origin` header is `origin` and whose
    /// `Host` header is `host` may be upgraded, on a door serving TLS
    /// when `tls` is set; the error says why not, for the 403 and the log.
    pub fn admits(&self, origin: Option<&str>, host: &str, tls: bool) -> Result<(), String> {
        let Some(origin) = origin else {
            return Ok(());
        };
        let page = origin_key(origin.trim()).ok();
        if self.same_origin {
            let scheme = if tls { "https" } else { "http" };
            let own = origin_key(&format!("{scheme}://{}", host.trim())).ok();
            if page.is_none() || page != own {
                return Err(format!(
                    "the page's origin {origin:?} is not this door's own ({scheme}://{}), which same_origin: true asks for",
                    host.trim()
                ));
            }
        }
        if !self.allowed.is_empty() && !page.is_some_and(|page| self.allowed.contains(&page)) {
            return Err(format!(
                "the page's origin {origin:?} is not in this door's allowed_origins"
            ));
        }
        Ok(())
    }
}

/// An origin, `scheme://host` or `scheme://host:port`, as compared: the
/// scheme and host in lower case and the port written out (80 for http,
/// 443 for https). The error says why `text` is not one.
pub fn origin_key(text: &str) -> Result<String, String> {
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err("an origin is scheme://host or scheme://host:port, such as https://dashboard.example.com".into());
    };
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(format!("a page's origin is http or https, not {scheme}")),
    };
    if rest.contains(['/', '?', '#', '@']) {
        return Err("an origin is a scheme, a host and a port only: no path, query or user name, as a browser sends it".into());
    }
    let (host, port) = match rest.rsplit_once(':') {
        // A port after an IPv6 address in brackets, or after a name.
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (rest, None),
    };
    let port = match port {
        None => default_port,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{port:?} is not a port from 1 to 65535"))?,
    };
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let plain = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !bracketed && !plain {
        return Err(format!("{host:?} is not a host name or an IP address"));
    }
    Ok(format!("{scheme}://{}:{port}", host.to_ascii_lowercase()))
}

/// What one WebSocket connection holds at worst beyond a TCP one's: its
/// upgrade request while it is read, and its framing state after.
pub const WORST_CASE_CONNECTION_BYTES: u64 =
    handshake::MAX_HEAD_BYTES as u64 + stream::STATE_BYTES as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_compared_as_a_browser_sends_them() {
        assert_eq!(
            origin_key("HTTPS://Dash.Example.com").unwrap(),
            "https://dash.example.com:443"
        );
        assert_eq!(
            origin_key("http://192.0.2.10:8080").unwrap(),
            "http://192.0.2.10:8080"
        );
        assert_eq!(origin_key("http://[::1]:80").unwrap(), "http://[::1]:80");
        assert_eq!(origin_key("http://[::1]").unwrap(), "http://[::1]:80");
        for refused in [
            "dashboard.example.com",
            "ftp://x",
            "https://x/path",
            "https://user@x",
            "https://x:0",
            "https://x:port",
            "https://",
            "null",
        ] {
            assert!(origin_key(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn same_origin_admits_the_doors_own_pages_and_a_list_admits_its_own() {
        let own = Origins::new(true, Vec::new());
        assert!(own.admits(None, "127.0.0.1:8083", false).is_ok());
        assert!(own
            .admits(Some("http://127.0.0.1:8083"), "127.0.0.1:8083", false)
            .is_ok());
        assert!(own.admits(Some("https://gw:443"), "gw", true).is_ok());
        // Another port is another site, and https is not http.
        assert!(own
            .admits(Some("http://127.0.0.1:8084"), "127.0.0.1:8083", false)
            .is_err());
        assert!(own.admits(Some("http://gw"), "gw", true).is_err());
        assert!(own.admits(Some("null"), "gw", false).is_err());

        let listed = Origins::new(false, vec!["https://dash.example.com".into()]);
        assert!(listed
            .admits(Some("https://DASH.example.com:443"), "gw:8083", false)
            .is_ok());
        assert!(listed
            .admits(Some("https://other.example.com"), "gw:8083", false)
            .is_err());
        assert!(listed.admits(Some("null"), "gw:8083", false).is_err());
        // Both set: a page must pass both.
        let both = Origins::new(true, vec!["http://gw:8083".into()]);
        assert!(both
            .admits(Some("http://gw:8083"), "gw:8083", false)
            .is_ok());
        assert!(both
            .admits(Some("http://gw:8083"), "other:8083", false)
            .is_err());
        let open = Origins::new(false, Vec::new());
        assert!(open
            .admits(Some("http://anything.example"), "gw", false)
            .is_ok());
    }
}
