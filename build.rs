//! Compresses what the binary carries compressed: the status page
//! (`src/ops/status_page.html`) and the licences of the crates compiled in
//! (`packaging/licenses.txt`), with the gzip code the broker reads them
//! back with; and writes the page's Content-Security-Policy, which names
//! its one inline script and one inline style by their SHA-256.

use std::path::Path;

use base64ct::{Base64, Encoding};
use sha2::{Digest, Sha256};

// The broker's own gzip, which needs only the CRC-32 beside it, at the
// path it names it by.
#[allow(dead_code)]
#[path = "src/store/checksum.rs"]
mod checksum;
mod store {
    pub(crate) use super::checksum;
}
#[allow(dead_code)]
#[path = "src/ops/gzip.rs"]
mod gzip;

const PAGE: &str = "src/ops/status_page.html";
const LICENSES: &str = "packaging/licenses.txt";

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    for file in [PAGE, LICENSES] {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed=src/ops/gzip.rs");
    println!("cargo:rerun-if-changed=src/store/checksum.rs");

    let page = read(PAGE);
    write(
        &out.join("status_page.html.gz"),
        &gzip::compress(page.as_bytes()),
    );
    write(&out.join("status_page.csp"), policy(&page).as_bytes());
    let licenses = read(LICENSES);
    write(
        &out.join("licenses.txt.gz"),
        &gzip::compress(licenses.as_bytes()),
    );
}

fn read(file: &str) -> String {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The page's policy: nothing but its own inline script and style, and
/// requests back to this listener.
fn policy(page: &str) -> String {
    let script = hash(inline(page, "script"));
    let style = hash(inline(page, "style"));
    format!(
        "default-src 'none'; script-src '{script}'; style-src '{style}'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

/// What the page's one `<tag>` element holds, exactly as the browser
/// hashes it.
fn inline<'a>(page: &'a str, tag: &str) -> &'a str {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = page
        .find(&open)
        .unwrap_or_else(|| panic!("{PAGE} has no {open}"))
        + open.len();
    let end = start
        + page[start..]
            .find(&close)
            .unwrap_or_else(|| panic!("{PAGE} never closes {open}"));
    assert!(
        !page[end..].contains(&open),
        "{PAGE} holds more than one {open}: the policy names one"
    );
    &page[start..end]
}

fn hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!("sha256-{}", Base64::encode_string(&digest))
}
