//! Feeds arbitrary bytes to the reader of the PROXY v2 header a Unix door
//! with `proxy_protocol` takes ahead of HTTP or MQTT. It must never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use saguin::ops::proxy;

fuzz_target!(|data: &[u8]| {
    let Some(fixed) = data.get(..proxy::FIXED_BYTES) else {
        return;
    };
    let fixed: [u8; proxy::FIXED_BYTES] = fixed.try_into().unwrap();
    if proxy::body_length(&fixed).is_ok() {
        let _ = proxy::read(&fixed, &data[proxy::FIXED_BYTES..]);
        let _ = proxy::source(&fixed, &data[proxy::FIXED_BYTES..]);
    }
});
