//! PROXY protocol v2 headers as a TLS-terminating proxy writes them.

/// TLS, and a client certificate on the connection and in the session:
/// the client flags of a verified certificate.
pub const VERIFIED: u8 = 0x01 | 0x02 | 0x04;

/// A PROXY header from 192.0.2.7:40000 to 192.0.2.1:9090, with an SSL
/// TLV where given: the client flags, the verify result and, where
/// given, the certificate's Common Name.
pub fn proxy_v2(ssl: Option<(u8, u32, Option<&str>)>) -> Vec<u8> {
    let mut body = vec![192, 0, 2, 7, 192, 0, 2, 1, 0x9c, 0x40, 0x23, 0x82];
    if let Some((client, verify, name)) = ssl {
        let mut value = vec![client];
        value.extend_from_slice(&verify.to_be_bytes());
        if let Some(name) = name {
            value.push(0x22);
            value.extend_from_slice(&(name.len() as u16).to_be_bytes());
            value.extend_from_slice(name.as_bytes());
        }
        body.push(0x20);
        body.extend_from_slice(&(value.len() as u16).to_be_bytes());
        body.extend_from_slice(&value);
    }
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.extend_from_slice(&[0x21, 0x11]);
    header.extend_from_slice(&(body.len() as u16).to_be_bytes());
    header.extend_from_slice(&body);
    header
}
