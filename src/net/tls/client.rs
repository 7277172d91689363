//! TLS from a bridge to its peer: the authorities the peer's certificate
//! is verified against, and the certificate this broker presents when the
//! peer asks for one. There is no way to accept an unverified peer.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};

use super::{certificates_at, key_at};
use crate::bridge::{BridgeSettings, PeerTls};

/// Where a system keeps its bundle of public authorities: Debian and
/// Ubuntu, Fedora and RHEL, then OpenWrt and Alpine.
const SYSTEM_AUTHORITY_FILES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// What one bridge's handshakes run on.
#[derive(Clone)]
pub struct PeerTlsConfig {
    pub config: Arc<ClientConfig>,
    /// The name the peer's certificate must carry: its host.
    pub server_name: ServerName<'static>,
}

/// Every bridge's TLS, in bridge order (`None` for a `tcp://` peer). Every
/// file that cannot be used is one error, all reported together.
pub fn load_all(bridges: &[BridgeSettings]) -> Result<Vec<Option<PeerTlsConfig>>, Vec<String>> {
    let mut configs = Vec::with_capacity(bridges.len());
    let mut errors = Vec::new();
    for bridge in bridges {
        match &bridge.peer.tls {
            None => configs.push(None),
            Some(tls) => match load(&bridge.name, &bridge.peer.host, tls) {
                Ok(config) => configs.push(Some(config)),
                Err(bridge_errors) => errors.extend(bridge_errors),
            },
        }
    }
    if errors.is_empty() {
        Ok(configs)
    } else {
        Err(errors)
    }
}

/// Bridge `name`'s TLS to the peer `host`, or an error for each part that
/// cannot be used: the host as a certificate name, the authorities, the
/// certificate and the key it presents.
pub fn load(name: &str, host: &str, tls: &PeerTls) -> Result<PeerTlsConfig, Vec<String>> {
    let at = format!("bridges.{name}");
    let server_name = ServerName::try_from(host.to_string()).map_err(|_| {
        format!(
            "{at}.peer: {host:?} is neither a host name nor an IP address a certificate can name"
        )
    });
    let roots = authorities(&at, tls.ca_file.as_deref());
    let identity = tls.identity.as_ref().map(|(cert_file, key_file)| {
        let chain = certificates_at(&format!("{at}.cert_file"), cert_file);
        let key = key_at(&format!("{at}.key_file"), key_file);
        match (chain, key) {
            (Ok(chain), Ok(key)) => Ok((chain, key)),
            (chain, key) => Err([chain.err(), key.err()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()),
        }
    });
    let (server_name, roots, identity) = match (server_name, roots, identity.transpose()) {
        (Ok(server_name), Ok(roots), Ok(identity)) => (server_name, roots, identity),
        (server_name, roots, identity) => {
            let mut errors: Vec<String> = [server_name.err(), roots.err()]
                .into_iter()
                .flatten()
                .collect();
            errors.extend(identity.err().unwrap_or_default());
            return Err(errors);
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| {
            vec![format!(
                "{at}: the TLS library refuses its versions: {error}"
            )]
        })?
        .with_root_certificates(roots);
    let config = match (identity, &tls.identity) {
        (Some((chain, key)), Some((cert_file, key_file))) => {
            builder.with_client_auth_cert(chain, key).map_err(|error| {
                vec![format!(
                    "{at}.key_file {}: it cannot present the certificate in cert_file {} with it: {error}",
                    key_file.display(),
                    cert_file.display()
                )]
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(PeerTlsConfig {
        config: Arc::new(config),
        server_name,
    })
}

/// The authorities the peer's certificate is verified against: those in
/// `ca_file`, or the system's bundle where none is named.
fn authorities(at: &str, ca_file: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let Some(path) = ca_file else {
        let bundle = SYSTEM_AUTHORITY_FILES
            .iter()
            .map(Path::new)
            .find(|path| path.exists())
            .ok_or_else(|| {
                format!(
                    "{at}.ca_file: not given, and this system has no bundle of public authorities (looked for {}); name the authority that signs the peer's certificate",
                    SYSTEM_AUTHORITY_FILES.join(", ")
                )
            })?;
        let system = certificates_at(&format!("{at} (system authorities)"), bundle)?;
        // A bundle may carry an entry the verifier cannot use; the rest serve.
        roots.add_parsable_certificates(system);
        return Ok(roots);
    };
    for certificate in certificates_at(&format!("{at}.ca_file"), path)? {
        roots.add(certificate).map_err(|error| {
            format!(
                "{at}.ca_file {}: a certificate in it cannot serve as an authority: {error}",
                path.display()
            )
        })?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::Peer;

    fn bridge(tls: PeerTls) -> BridgeSettings {
        BridgeSettings {
            name: "up".into(),
            peer: Peer {
                host: "127.0.0.1".into(),
                port: 8883,
                tls: Some(tls),
                websocket: None,
            },
            client_id: "gw".into(),
            username: None,
            password: None,
            session_expiry_s: 60,
            receive_maximum: 1,
            ack_interval_ms: 5,
            rules: Vec::new(),
        }
    }

    #[test]
    fn every_unreadable_file_is_named_with_its_key_at_once() {
        let missing = PeerTls {
            ca_file: Some("/nonexistent/ca.pem".into()),
            identity: None,
        };
        let half = PeerTls {
            ca_file: None,
            identity: Some(("/nonexistent/b.pem".into(), "/nonexistent/k.pem".into())),
        };
        let mut second = bridge(half);
        second.name = "other".into();
        let errors = match load_all(&[bridge(missing), second]) {
            Ok(_) => panic!("files that do not exist were accepted"),
            Err(errors) => errors,
        };
        // One error for each file, the certificate's and its key's both.
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with("bridges.up.ca_file /nonexistent/ca.pem: cannot read it"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("bridges.other.cert_file /nonexistent/b.pem: cannot read it"),
            "{errors:?}"
        );
        assert!(
            errors[2].starts_with("bridges.other.key_file /nonexistent/k.pem: cannot read it"),
            "{errors:?}"
        );
    }
}
