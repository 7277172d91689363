//! Feeds arbitrary bytes to the reader of a certificate's expiry, Common
//! Name and DNS names. It must never panic, and a time it reads must show.

#![no_main]

use libfuzzer_sys::fuzz_target;
use saguin::net::tls::x509;

fuzz_target!(|data: &[u8]| {
    let facts = x509::read(data);
    if let Some(unix_s) = facts.not_after_unix_s {
        let _ = x509::show_unix_time(unix_s);
    }
    let _ = facts.name();
});
