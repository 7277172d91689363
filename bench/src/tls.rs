//! The one certificate both brokers serve in the TLS figure, made with
//! `openssl` at run time: an authority, and a server certificate it signs
//! for 127.0.0.1. The load generator trusts that authority alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// The files a TLS door is configured with, and the authority behind them.
pub struct ServerCertificate {
    pub authority: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The curve of every key made here: P-256, which every TLS stack has.
const CURVE: &str = "ec_paramgen_curve:P-256";
const VALID_DAYS: &str = "30";

/// Makes an authority and a server certificate for 127.0.0.1 in `dir`,
/// readable by mosquitto after it drops to its own user.
pub fn make_server_certificate(dir: &Path) -> Result<ServerCertificate, String> {
    let files = ServerCertificate {
        authority: dir.join("bench-ca.pem"),
        cert: dir.join("broker.pem"),
        key: dir.join("broker-key.pem"),
    };
    let path = |p: &Path| p.display().to_string();
    let ca_key = dir.join("bench-ca-key.pem");
    let request = dir.join("broker.csr");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        CURVE,
        "-days",
        VALID_DAYS,
        "-nodes",
        "-subj",
        "/CN=saguin-bench authority",
        "-keyout",
        &path(&ca_key),
        "-out",
        &path(&files.authority),
    ])?;
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        CURVE,
        "-nodes",
        "-subj",
        "/CN=broker",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        &path(&files.key),
        "-out",
        &path(&request),
    ])?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        &path(&request),
        "-CA",
        &path(&files.authority),
        "-CAkey",
        &path(&ca_key),
        "-CAcreateserial",
        "-days",
        VALID_DAYS,
        "-copy_extensions",
        "copy",
        "-out",
        &path(&files.cert),
    ])?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("chmod {}: {e}", files.key.display()))?;
    Ok(files)
}

fn openssl(args: &[&str]) -> Result<(), String> {
    let output = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run openssl (apt-get install openssl): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "openssl {}: {}",
            args[0],
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

/// A client that trusts `authority` alone and never resumes a session, so
/// every connection pays for a full handshake, as a fleet's first
/// connections do.
pub fn client_config(authority: &Path) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(authority)
        .map_err(|e| format!("{}: {e}", authority.display()))?
    {
        let certificate = certificate.map_err(|e| format!("{}: {e}", authority.display()))?;
        roots
            .add(certificate)
            .map_err(|e| format!("{}: {e}", authority.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = Resumption::disabled();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::thread;

    use saguin::codec::ProtocolVersion;
    use saguin::net::tls::{self as door, TlsSettings, TlsVersion};

    use super::*;
    use crate::brokers::TempDir;
    use crate::client::{Client, ClientOptions, Endpoint};

    const OPTIONS: ClientOptions = ClientOptions {
        version: ProtocolVersion::V311,
        keep_alive_s: 60,
        receive_maximum: None,
    };

    /// A one-connection server on the broker's own TLS door code, serving
    /// `served`: it reads the CONNECT and answers a CONNACK accepting it.
    fn serve_one(served: &ServerCertificate) -> (std::net::SocketAddr, thread::JoinHandle<()>) {
        let settings = TlsSettings {
            door: "test".into(),
            cert_file: served.cert.clone(),
            key_file: served.key.clone(),
            min_version: TlsVersion::V1_2,
            client_ca_file: None,
            require_certificate: false,
        };
        let config = door::load(&settings).expect("the door loads").config;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (socket, _) = listener.accept().unwrap();
            let connection = rustls::ServerConnection::new(config).unwrap();
            let mut stream = rustls::StreamOwned::new(connection, socket);
            let mut connect = [0u8; 2];
            if stream.read_exact(&mut connect).is_ok() {
                assert_eq!(connect[0], 0x10, "a CONNECT");
                let mut rest = vec![0u8; usize::from(connect[1])];
                stream.read_exact(&mut rest).unwrap();
                stream.write_all(&[0x20, 0x02, 0x00, 0x00]).unwrap();
                stream.flush().unwrap();
            }
        });
        (address, server)
    }

    #[test]
    fn a_client_trusting_the_authority_connects_over_tls_and_another_is_refused() {
        let dir = TempDir::new("tls-test").unwrap();
        let served = make_server_certificate(dir.path()).expect("openssl makes the files");
        let (address, server) = serve_one(&served);
        let endpoint = Endpoint {
            door: Default::default(),
            address,
            tls: Some(client_config(&served.authority).unwrap()),
            credentials: None,
        };
        let client = Client::connect_to(&endpoint, "tls-probe", &OPTIONS).expect("connected");
        assert!(client.is_tls());
        client.disconnect();
        server.join().unwrap();

        let other_dir = TempDir::new("tls-test-other").unwrap();
        let other = make_server_certificate(other_dir.path()).unwrap();
        let (address, server) = serve_one(&served);
        let distrusting = Endpoint {
            door: Default::default(),
            address,
            tls: Some(client_config(&other.authority).unwrap()),
            credentials: None,
        };
        let refused = Client::connect_to(&distrusting, "tls-probe", &OPTIONS);
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("TLS handshake")),
            "a certificate from another authority was trusted: {:?}",
            refused.err()
        );
        server.join().unwrap();
    }
}
