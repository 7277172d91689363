//! The PROXY protocol v2 header a proxy in front of a Unix door
//! (`proxy_protocol: true`, on an operations door or an MQTT one) writes
//! before anything else: who its client is, and, where the proxy
//! terminated TLS and verified a client certificate, that certificate's
//! Common Name. The socket's file permissions decide who may write one,
//! so the name is believed there and on no TCP door.
//!
//! Only v2 is read: v1 is text with addresses and no room for the
//! certificate, and is refused naming the setting that sends v2.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use smol::io::{AsyncRead, AsyncReadExt};

use super::route::Certified;

/// The twelve bytes every v2 header starts with.
const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The signature, the version and command, the family and the length.
pub const FIXED_BYTES: usize = 16;
/// The most a header may carry after its fixed part. A proxy's header
/// holds addresses and a few short TLVs, a few hundred bytes; the format
/// allows 64 KiB, which nothing here needs to hold.
pub const MAX_BODY_BYTES: usize = 4096;
/// How long a connection may take to send its header: a proxy writes it
/// as it connects.
pub const HEADER_TIMEOUT_MS: u64 = 5_000;

const COMMAND_LOCAL: u8 = 0x0;
const COMMAND_PROXY: u8 = 0x1;

const TLV_CRC32C: u8 = 0x03;
const TLV_SSL: u8 = 0x20;
const SSL_SUBTYPE_CN: u8 = 0x22;
/// The client flags of the SSL TLV.
const CLIENT_SSL: u8 = 0x01;
const CLIENT_CERT_CONN: u8 = 0x02;
const CLIENT_CERT_SESS: u8 = 0x04;

/// What a header says of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Told {
    /// No verified certificate: a LOCAL header (the proxy's own health
    /// check), a client without TLS or without a certificate.
    Nobody,
    /// A certificate the proxy verified: by its Common Name when the
    /// header carries one.
    Certified(Certified),
    /// A certificate the proxy could not verify (its verify result, not
    /// 0): named nobody, and logged.
    Unverified { verify_result: u32 },
}

/// The length of what follows the fixed part, or why the connection is
/// refused. `fixed` is the first [`FIXED_BYTES`] the connection sent.
pub fn body_length(fixed: &[u8; FIXED_BYTES]) -> Result<usize, String> {
    if fixed.starts_with(b"PROXY ") {
        return Err(
            "a PROXY protocol v1 header arrived; the door reads v2 only: set the proxy to send v2 (nginx: proxy_protocol v2; HAProxy: send-proxy-v2-ssl-cn)".into(),
        );
    }
    if fixed[..12] != SIGNATURE {
        return Err(
            "the connection did not start with a PROXY protocol v2 header, which proxy_protocol: true asks of every connection".into(),
        );
    }
    if fixed[12] >> 4 != 2 {
        return Err(format!(
            "a PROXY header of version {}; the door reads version 2",
            fixed[12] >> 4
        ));
    }
    let length = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if length > MAX_BODY_BYTES {
        return Err(format!(
            "a PROXY v2 header of {length} bytes after its first 16; at most {MAX_BODY_BYTES} are read"
        ));
    }
    Ok(length)
}

/// Reads a whole header: its fixed part and the `body` [`body_length`]
/// announced.
pub fn read(fixed: &[u8; FIXED_BYTES], body: &[u8]) -> Result<Told, String> {
    let command = fixed[12] & 0x0f;
    if command != COMMAND_LOCAL && command != COMMAND_PROXY {
        return Err(format!(
            "a PROXY v2 header with command {command}, neither LOCAL nor PROXY"
        ));
    }
    let mut certified = None;
    // The TLVs follow the addresses.
    let mut at = address_bytes(fixed[13]).min(body.len());
    while at < body.len() {
        let (kind, value, next) = tlv(body, at).ok_or("a PROXY v2 header whose TLVs overrun it")?;
        match kind {
            TLV_CRC32C => check_crc32c(fixed, body, at, value)?,
            TLV_SSL => certified = Some(ssl(value)?),
            _ => {}
        }
        at = next;
    }
    if command == COMMAND_LOCAL {
        return Ok(Told::Nobody);
    }
    Ok(certified.unwrap_or(Told::Nobody))
}

/// A whole header as read off a connection: what it says of the caller,
/// and where the caller connected to the proxy from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub told: Told,
    /// The source address of a PROXY command over IPv4 or IPv6; `None`
    /// for a LOCAL one and for other families.
    pub source: Option<SocketAddr>,
}

/// Reads exactly the header a connection starts with, leaving what follows
/// it unread, within [`HEADER_TIMEOUT_MS`]; the error says why the
/// connection is refused (no header, v1, unsound, or too slow).
pub async fn read_header<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Header, String> {
    let read = async {
        let mut fixed = [0u8; FIXED_BYTES];
        stream
            .read_exact(&mut fixed)
            .await
            .map_err(|e| e.to_string())?;
        let length = body_length(&fixed)?;
        let mut body = vec![0u8; length];
        stream
            .read_exact(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        let told = read(&fixed, &body)?;
        Ok(Header {
            told,
            source: source(&fixed, &body),
        })
    };
    let deadline = async {
        smol::Timer::after(Duration::from_millis(HEADER_TIMEOUT_MS)).await;
        Err(format!("no PROXY v2 header within {HEADER_TIMEOUT_MS} ms"))
    };
    smol::future::or(read, deadline).await
}

/// The client's own address, from the addresses a PROXY command carries:
/// source then destination address, source then destination port.
pub fn source(fixed: &[u8; FIXED_BYTES], body: &[u8]) -> Option<SocketAddr> {
    if fixed[12] & 0x0f != COMMAND_PROXY {
        return None;
    }
    let (ip, port_at) = match fixed[13] >> 4 {
        0x1 => {
            let octets: [u8; 4] = body.get(..4)?.try_into().ok()?;
            (IpAddr::from(octets), 8)
        }
        0x2 => {
            let octets: [u8; 16] = body.get(..16)?.try_into().ok()?;
            (IpAddr::from(octets), 32)
        }
        _ => return None,
    };
    let port = body.get(port_at..port_at + 2)?;
    Some(SocketAddr::new(ip, u16::from_be_bytes([port[0], port[1]])))
}

/// The bytes the addresses of `family` take: IPv4, IPv6, Unix, or none.
fn address_bytes(family: u8) -> usize {
    match family >> 4 {
        0x1 => 12,
        0x2 => 36,
        0x3 => 216,
        _ => 0,
    }
}

/// The TLV at `at`: its type, its value and where the next starts.
fn tlv(bytes: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let head = bytes.get(at..at + 3)?;
    let length = usize::from(u16::from_be_bytes([head[1], head[2]]));
    let value = bytes.get(at + 3..at + 3 + length)?;
    Some((head[0], value, at + 3 + length))
}

/// The header's checksum is over all of it with the checksum's own four
/// bytes as zeros.
fn check_crc32c(
    fixed: &[u8; FIXED_BYTES],
    body: &[u8],
    tlv_at: usize,
    value: &[u8],
) -> Result<(), String> {
    let Ok(stated) = <[u8; 4]>::try_from(value) else {
        return Err("a PROXY v2 CRC32C of other than four bytes".into());
    };
    let mut zeroed = body.to_vec();
    zeroed[tlv_at + 3..tlv_at + 7].fill(0);
    let computed = crate::store::checksum::crc32c_of(&[fixed, &zeroed]);
    if computed != u32::from_be_bytes(stated) {
        return Err("a PROXY v2 header whose CRC32C does not match it".into());
    }
    Ok(())
}

/// The SSL TLV: client flags, verify result, then TLVs of its own.
fn ssl(value: &[u8]) -> Result<Told, String> {
    let (&client, rest) = value.split_first().ok_or("an empty PROXY v2 SSL TLV")?;
    let verify = rest.get(..4).ok_or("a PROXY v2 SSL TLV cut short")?;
    let verify_result = u32::from_be_bytes([verify[0], verify[1], verify[2], verify[3]]);
    let subs = &rest[4..];
    let mut common_name = None;
    let mut at = 0;
    while at < subs.len() {
        let (kind, sub, next) =
            tlv(subs, at).ok_or("a PROXY v2 SSL TLV whose own TLVs overrun it")?;
        if kind == SSL_SUBTYPE_CN {
            let name = std::str::from_utf8(sub)
                .map_err(|_| "a Common Name in a PROXY v2 header that is not UTF-8")?;
            common_name = Some(name.to_string());
        }
        at = next;
    }
    let presented = client & CLIENT_SSL != 0 && client & (CLIENT_CERT_CONN | CLIENT_CERT_SESS) != 0;
    Ok(match (presented, verify_result) {
        (false, _) => Told::Nobody,
        (true, 0) => Told::Certified(common_name.map_or(Certified::Unnamed, Certified::Named)),
        (true, verify_result) => Told::Unverified { verify_result },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PROXY header from 192.0.2.7:40000 to 192.0.2.1:9090 carrying
    /// `tlvs`, with a CRC32C when `checksum` is set.
    fn header(command: u8, tlvs: &[u8], checksum: bool) -> Vec<u8> {
        let mut body = vec![192, 0, 2, 7, 192, 0, 2, 1, 0x9c, 0x40, 0x23, 0x82];
        body.extend_from_slice(tlvs);
        if checksum {
            body.extend_from_slice(&[TLV_CRC32C, 0, 4, 0, 0, 0, 0]);
        }
        let mut bytes = SIGNATURE.to_vec();
        bytes.extend_from_slice(&[0x20 | command, 0x11]);
        bytes.extend_from_slice(&(body.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&body);
        if checksum {
            let sum = crate::store::checksum::crc32c(&bytes).to_be_bytes();
            let at = bytes.len() - 4;
            bytes[at..].copy_from_slice(&sum);
        }
        bytes
    }

    /// An SSL TLV with `client` flags, `verify_result` and a Common Name.
    fn ssl_tlv(client: u8, verify_result: u32, common_name: Option<&str>) -> Vec<u8> {
        let mut value = vec![client];
        value.extend_from_slice(&verify_result.to_be_bytes());
        // The TLS version, as nginx and HAProxy send it before the name.
        value.extend_from_slice(&[0x21, 0, 7]);
        value.extend_from_slice(b"TLSv1.3");
        if let Some(name) = common_name {
            value.push(SSL_SUBTYPE_CN);
            value.extend_from_slice(&(name.len() as u16).to_be_bytes());
            value.extend_from_slice(name.as_bytes());
        }
        let mut tlv = vec![TLV_SSL];
        tlv.extend_from_slice(&(value.len() as u16).to_be_bytes());
        tlv.extend_from_slice(&value);
        tlv
    }

    fn told(bytes: &[u8]) -> Result<Told, String> {
        let fixed: [u8; FIXED_BYTES] = bytes[..FIXED_BYTES].try_into().unwrap();
        let length = body_length(&fixed)?;
        assert_eq!(length, bytes.len() - FIXED_BYTES);
        read(&fixed, &bytes[FIXED_BYTES..])
    }

    const VERIFIED: u8 = CLIENT_SSL | CLIENT_CERT_CONN | CLIENT_CERT_SESS;

    #[test]
    fn a_verified_certificate_names_the_caller_by_its_common_name() {
        for checksum in [false, true] {
            let bytes = header(
                COMMAND_PROXY,
                &ssl_tlv(VERIFIED, 0, Some("oncall")),
                checksum,
            );
            assert_eq!(
                told(&bytes),
                Ok(Told::Certified(Certified::Named("oncall".into())))
            );
        }
        let unnamed = header(COMMAND_PROXY, &ssl_tlv(VERIFIED, 0, None), true);
        assert_eq!(told(&unnamed), Ok(Told::Certified(Certified::Unnamed)));
    }

    #[test]
    fn the_source_address_is_the_clients_own() {
        let bytes = header(COMMAND_PROXY, &[], false);
        let fixed: [u8; FIXED_BYTES] = bytes[..FIXED_BYTES].try_into().unwrap();
        assert_eq!(
            source(&fixed, &bytes[FIXED_BYTES..]),
            Some("192.0.2.7:40000".parse().unwrap())
        );
        let local = header(COMMAND_LOCAL, &[], false);
        let fixed: [u8; FIXED_BYTES] = local[..FIXED_BYTES].try_into().unwrap();
        assert_eq!(source(&fixed, &local[FIXED_BYTES..]), None);
        // IPv6: 2001:db8::7 port 443 to 2001:db8::1 port 8883.
        let mut body = vec![0x20, 0x01, 0x0d, 0xb8];
        body.extend_from_slice(&[0; 11]);
        body.push(7);
        body.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        body.extend_from_slice(&[0; 11]);
        body.push(1);
        body.extend_from_slice(&[0x01, 0xbb, 0x22, 0xb3]);
        let mut fixed = [0u8; FIXED_BYTES];
        fixed[..12].copy_from_slice(&SIGNATURE);
        fixed[12] = 0x20 | COMMAND_PROXY;
        fixed[13] = 0x21;
        fixed[14..].copy_from_slice(&(body.len() as u16).to_be_bytes());
        assert_eq!(
            source(&fixed, &body),
            Some("[2001:db8::7]:443".parse().unwrap())
        );
        // Cut short, it says nothing rather than failing.
        assert_eq!(source(&fixed, &body[..20]), None);
    }

    #[test]
    fn a_certificate_the_proxy_could_not_verify_names_nobody() {
        let bytes = header(
            COMMAND_PROXY,
            &ssl_tlv(VERIFIED, 21, Some("device-7")),
            false,
        );
        assert_eq!(told(&bytes), Ok(Told::Unverified { verify_result: 21 }));
        // TLS without a certificate, and no TLS at all.
        let plain_tls = header(COMMAND_PROXY, &ssl_tlv(CLIENT_SSL, 0, Some("x")), false);
        assert_eq!(told(&plain_tls), Ok(Told::Nobody));
        assert_eq!(told(&header(COMMAND_PROXY, &[], true)), Ok(Told::Nobody));
        // The proxy's own health check speaks for nobody, whatever it carries.
        let local = header(COMMAND_LOCAL, &ssl_tlv(VERIFIED, 0, Some("oncall")), false);
        assert_eq!(told(&local), Ok(Told::Nobody));
    }

    #[test]
    fn no_damage_to_a_header_panics_the_reader() {
        let whole = header(COMMAND_PROXY, &ssl_tlv(VERIFIED, 0, Some("oncall")), true);
        let fixed: [u8; FIXED_BYTES] = whole[..FIXED_BYTES].try_into().unwrap();
        let body = &whole[FIXED_BYTES..];
        // Every truncation, and every byte flipped in turn (the fixed part
        // included), is read to an answer.
        for end in 0..=body.len() {
            let _ = read(&fixed, &body[..end]);
        }
        for at in 0..whole.len() {
            let mut damaged = whole.clone();
            damaged[at] ^= 0xff;
            let fixed: [u8; FIXED_BYTES] = damaged[..FIXED_BYTES].try_into().unwrap();
            if body_length(&fixed).is_ok() {
                let _ = read(&fixed, &damaged[FIXED_BYTES..]);
            }
        }
    }

    #[test]
    fn headers_that_are_not_sound_v2_are_refused_naming_why() {
        let v1 = b"PROXY TCP4 192.0.2.7 192.0.2.1 40000 9090\r\n";
        let fixed: [u8; FIXED_BYTES] = v1[..FIXED_BYTES].try_into().unwrap();
        assert!(body_length(&fixed)
            .unwrap_err()
            .contains("proxy_protocol v2"));
        let http: [u8; FIXED_BYTES] = b"GET /metrics HTT".to_owned();
        assert!(body_length(&http)
            .unwrap_err()
            .contains("did not start with"));
        let mut huge = header(COMMAND_PROXY, &[], false);
        huge[14..16].copy_from_slice(&((MAX_BODY_BYTES + 1) as u16).to_be_bytes());
        let fixed: [u8; FIXED_BYTES] = huge[..FIXED_BYTES].try_into().unwrap();
        assert!(body_length(&fixed).unwrap_err().contains("at most"));
        let mut version_one = header(COMMAND_PROXY, &[], false);
        version_one[12] = 0x11;
        assert!(told(&version_one).unwrap_err().contains("version 1"));
        // A checksum that does not match, and a TLV longer than the header.
        let mut tampered = header(COMMAND_PROXY, &ssl_tlv(VERIFIED, 0, Some("oncall")), true);
        let name_at = tampered.len() - 7 - 6;
        tampered[name_at] ^= 0x20;
        assert!(told(&tampered).unwrap_err().contains("CRC32C"));
        let mut overrun = header(COMMAND_PROXY, &ssl_tlv(VERIFIED, 0, Some("oncall")), false);
        let length_at = FIXED_BYTES + 12 + 1;
        overrun[length_at..length_at + 2].copy_from_slice(&500u16.to_be_bytes());
        assert!(told(&overrun).unwrap_err().contains("overrun"));
    }
}
