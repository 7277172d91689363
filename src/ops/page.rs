//! The status page at `/`: one HTML file with its style and script
//! inline (`status_page.html`), carried in the binary gzipped by
//! `build.rs`. It holds nothing of the broker's: it reads `/metrics` and
//! the `/v1` routes with the caller's own credential and redraws from
//! them, so each figure is shown only as far as that credential reaches.
//!
//! A client that accepts gzip (every browser) is sent the bytes as
//! carried; any other is sent them inflated, which costs an inflate per
//! request and no second copy in the binary.

use super::gzip;
use super::http::{Request, Response};

/// The page's path. No scope need name it: every operator the file holds
/// reaches it; a name the file does not hold reaches `/metrics` alone.
pub const PATH: &str = "/";

/// The page as carried.
pub const GZIPPED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/status_page.html.gz"));

/// Its Content-Security-Policy: its own inline script and style, by
/// hash, and requests back to this listener, nothing else.
const POLICY: &str = include_str!(concat!(env!("OUT_DIR"), "/status_page.csp"));

/// The most the page inflates to; it is a few tens of KiB.
const MAX_PAGE_BYTES: usize = 256 * 1024;

/// The headers a page served by a broker carries besides its policy: it
/// is not framed, sniffed, referred from or opened into another site's
/// window, and its resources are not another site's to load.
const PAGE_HEADERS: [(&str, &str); 6] = [
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    (
        "Permissions-Policy",
        "camera=(), microphone=(), geolocation=(), usb=()",
    ),
    ("Vary", "Accept-Encoding"),
];

/// The page, gzipped when `request` accepts it.
pub fn response(request: &Request) -> Response {
    let gzipped = request
        .header("accept-encoding")
        .is_some_and(gzip::accepted);
    let mut response = if gzipped {
        Response::bytes(200, "text/html; charset=utf-8", GZIPPED.to_vec())
            .with_header("Content-Encoding", "gzip")
    } else {
        match gzip::decompress(GZIPPED, MAX_PAGE_BYTES) {
            Ok(page) => Response::bytes(200, "text/html; charset=utf-8", page),
            // The build wrote it and a test reads it back: not reached.
            Err(why) => return Response::text(500, format!("the status page is damaged: {why}\n")),
        }
    };
    response = response.with_header("Content-Security-Policy", POLICY);
    for (name, value) in PAGE_HEADERS {
        response = response.with_header(name, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = include_str!("status_page.html");

    fn request(accept_encoding: Option<&str>) -> Request {
        Request {
            method: "GET".into(),
            path: PATH.into(),
            query: String::new(),
            headers: accept_encoding
                .map(|v| vec![("accept-encoding".to_string(), v.as_bytes().to_vec())])
                .unwrap_or_default(),
            keep_alive: false,
            announces_body: false,
        }
    }

    fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
        response
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_page_carried_is_the_source_and_goes_out_gzipped_when_accepted() {
        assert_eq!(
            gzip::decompress(GZIPPED, MAX_PAGE_BYTES).unwrap(),
            SOURCE.as_bytes()
        );
        let gzipped = response(&request(Some("gzip, deflate, br")));
        assert_eq!(header(&gzipped, "Content-Encoding"), Some("gzip"));
        assert_eq!(gzipped.body, GZIPPED);
        let plain = response(&request(None));
        assert_eq!(header(&plain, "Content-Encoding"), None);
        assert_eq!(plain.body, SOURCE.as_bytes());
        assert!(GZIPPED.len() < SOURCE.len() / 2, "{} bytes", GZIPPED.len());
    }

    #[test]
    fn the_policy_lets_nothing_but_the_page_s_own_script_and_style_run() {
        let page = response(&request(None));
        let policy = header(&page, "Content-Security-Policy").unwrap();
        assert!(
            policy.starts_with("default-src 'none'; script-src 'sha256-"),
            "{policy}"
        );
        assert!(!policy.contains("unsafe"), "{policy}");
        assert!(policy.contains("connect-src 'self'") && policy.contains("frame-ancestors 'none'"));
        // The hashes name what the page holds: one script, one style, and
        // nothing that would run beside them.
        use base64ct::{Base64, Encoding};
        use sha2::{Digest, Sha256};
        for tag in ["script", "style"] {
            let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
            let start = SOURCE.find(&open).unwrap() + open.len();
            let end = start + SOURCE[start..].find(&close).unwrap();
            let hash = Base64::encode_string(&Sha256::digest(&SOURCE.as_bytes()[start..end]));
            assert!(
                policy.contains(&format!("'sha256-{hash}'")),
                "{tag}: {policy}"
            );
        }
        for forbidden in [
            " style=",
            " onclick=",
            " onload=",
            "<link",
            "src=\"http",
            "innerHTML",
            "eval(",
        ] {
            assert!(!SOURCE.contains(forbidden), "the page holds {forbidden:?}");
        }
        assert_eq!(header(&page, "X-Frame-Options"), Some("DENY"));
        assert_eq!(header(&page, "Vary"), Some("Accept-Encoding"));
    }
}
