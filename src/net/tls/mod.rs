//! TLS on an MQTT door: the certificate and key it serves, the authorities
//! it checks client certificates against, and the re-reading of all of
//! them in place.
//!
//! Built on rustls with the ring provider. Nothing here can turn
//! verification off: a door either examines no client certificate at all,
//! or verifies every one presented against its `client_ca_file`.

pub mod client;
pub mod x509;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// A PEM file larger than this is not a certificate, a key or a bundle of
/// authorities, and is refused before it is read.
pub const MAX_PEM_FILE_BYTES: u64 = 1024 * 1024;

/// What rustls may hold for one connection at worst: one incoming record
/// (16 KiB of plaintext plus its overhead), 16 KiB of received plaintext
/// and 64 KiB of records waiting to be sent, which are its default bounds.
pub const WORST_CASE_CONNECTION_BYTES: u64 = (18 + 16 + 64) * 1024;

/// The lowest TLS version a door accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsVersion {
    /// `1.2`, the default.
    #[default]
    V1_2,
    /// `1.3`.
    V1_3,
}

/// A door's `tls` block, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// What messages call the door: `broker.mqtt.listen.tcp[fleet]`.
    pub door: String,
    /// The certificate chain served, leaf first. Absolute.
    pub cert_file: PathBuf,
    /// Its private key. Absolute.
    pub key_file: PathBuf,
    pub min_version: TlsVersion,
    /// The authorities a client certificate is verified against. Absent,
    /// no client certificate is asked for.
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: whether a client without a certificate is
    /// refused at the handshake.
    pub require_certificate: bool,
}

/// One door's TLS, loaded from its files.
pub struct Loaded {
    pub config: Arc<ServerConfig>,
    /// What the served certificate says, for the expiry log line.
    pub leaf: x509::Facts,
}

/// Reads a door's files and builds what its handshakes run on. Every file
/// that cannot be used is one error, naming the door, the file and what to
/// do, so a check reports them all at once.
pub fn load(settings: &TlsSettings) -> Result<Loaded, Vec<String>> {
    let door = &settings.door;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certificates(door, "cert_file", &settings.cert_file);
    let key = read_key(door, &settings.key_file);
    let roots = settings
        .client_ca_file
        .as_ref()
        .map(|path| authorities(door, path));
    let (chain, key, roots) = match (chain, key, roots.transpose()) {
        (Ok(chain), Ok(key), Ok(roots)) => (chain, key, roots),
        (chain, key, roots) => {
            return Err([chain.err(), key.err(), roots.err()]
                .into_iter()
                .flatten()
                .collect())
        }
    };
    let leaf = x509::read(&chain[0]);
    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V1_3 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|error| {
            vec![format!(
                "{door}.tls: the TLS library refuses its versions: {error}"
            )]
        })?;
    let builder = match (roots, &settings.client_ca_file) {
        (Some(roots), Some(path)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if settings.require_certificate {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier.build().map_err(|error| {
                vec![format!(
                    "{door}.tls.client_ca_file {}: cannot verify client certificates with it: {error}",
                    path.display()
                )]
            })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).map_err(|error| {
        let why = match error {
            rustls::Error::InconsistentKeys(_) => {
                "it is not the key of the certificate in cert_file (a renewal writes both files; check that neither is left from before)".to_string()
            }
            other => format!("the TLS library cannot use it: {other}"),
        };
        vec![format!(
            "{door}.tls.key_file {}: {why}, cert_file {}",
            settings.key_file.display(),
            settings.cert_file.display()
        )]
    })?;
    Ok(Loaded {
        config: Arc::new(config),
        leaf,
    })
}

/// The authorities in the door's `client_ca_file` at `path`.
fn authorities(door: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(door, "client_ca_file", path)? {
        roots.add(certificate).map_err(|error| {
            format!(
                "{door}.tls.client_ca_file {}: a certificate in it cannot serve as an authority: {error}",
                path.display()
            )
        })?;
    }
    Ok(roots)
}

/// Logs when a door's certificate stops being valid, at `warn` once it has.
pub fn log_expiry(settings: &TlsSettings, leaf: &x509::Facts, now_unix_s: i64) {
    let file = settings.cert_file.display();
    let door = &settings.door;
    match leaf.not_after_unix_s {
        Some(end) if end <= now_unix_s => log::warn!(
            "{door}: the certificate in {file} expired at {}; clients will refuse it until it is renewed (then send SIGUSR1)",
            x509::show_unix_time(end)
        ),
        Some(end) => log::info!(
            "{door}: serving the certificate in {file}, valid until {}",
            x509::show_unix_time(end)
        ),
        None => log::info!("{door}: serving the certificate in {file}"),
    }
}

fn read_certificates(
    door: &str,
    key: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, String> {
    certificates_at(&format!("{door}.tls.{key}"), path)
}

fn read_key(door: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    key_at(&format!("{door}.tls.key_file"), path)
}

/// Reads a PEM file; errors begin with `what`, the key that names it.
fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    let fail = |why: String| format!("{what} {}: {why}", path.display());
    let size = std::fs::metadata(path)
        .map_err(|error| fail(format!("cannot read it: {error}; {READABLE}")))?
        .len();
    if size > MAX_PEM_FILE_BYTES {
        return Err(fail(format!(
            "{size} bytes is larger than any PEM file this could be (at most {MAX_PEM_FILE_BYTES})"
        )));
    }
    std::fs::read(path).map_err(|error| fail(format!("cannot read it: {error}; {READABLE}")))
}

/// What to do about a PEM file that cannot be read.
const READABLE: &str = "give the path of a PEM file that exists and the broker's user may read";

/// The certificates in the PEM file `path`, which the key `what` names.
pub(crate) fn certificates_at(
    what: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(what, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{what} {}: not readable as PEM: {error}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "{what} {}: holds no certificate; it should hold one or more -----BEGIN CERTIFICATE----- blocks",
            path.display()
        ));
    }
    Ok(certificates)
}

/// The private key in the PEM file `path`, which the key `what` names.
pub(crate) fn key_at(what: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_pem(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| {
        let why = match error {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "holds no private key; it should hold a -----BEGIN PRIVATE KEY----- (or EC/RSA PRIVATE KEY) block".to_string()
            }
            other => format!("not readable as PEM: {other}"),
        };
        format!("{what} {}: {why}", path.display())
    })
}

/// Every TLS door's settings and what it currently serves, indexed by door.
/// A connection takes the configuration current when it is accepted and
/// keeps it for its life, so replacing one affects only later handshakes.
pub struct TlsDoors {
    settings: Vec<Option<TlsSettings>>,
    current: RefCell<Vec<Option<Arc<ServerConfig>>>>,
}

impl TlsDoors {
    /// Loads every door's files, refusing them all if any cannot be used,
    /// with every fault, a line each.
    pub fn load(settings: Vec<Option<TlsSettings>>, now_unix_s: i64) -> Result<TlsDoors, String> {
        let certificates = read_all(&settings).map_err(|errors| errors.join("\n"))?;
        certificates.log_expiry(now_unix_s);
        Ok(TlsDoors {
            settings,
            current: RefCell::new(certificates.configs),
        })
    }

    /// What door `door` is called in messages.
    pub fn name(&self, door: usize) -> &str {
        match self.settings.get(door) {
            Some(Some(settings)) => &settings.door,
            _ => "a plain door",
        }
    }

    /// What door `door` serves now, or `None` for a plain door.
    pub fn current(&self, door: usize) -> Option<Arc<ServerConfig>> {
        self.current.borrow().get(door).cloned().flatten()
    }

    /// Whether any door serves TLS.
    pub fn any(&self) -> bool {
        self.settings.iter().any(Option::is_some)
    }

    /// Every door's `tls` block, `None` for a plain door, in door order.
    pub fn settings(&self) -> &[Option<TlsSettings>] {
        &self.settings
    }

    /// Puts files read by [`read_all`] in force for the handshakes to come.
    pub fn apply(&self, certificates: Certificates, now_unix_s: i64) {
        certificates.log_expiry(now_unix_s);
        *self.current.borrow_mut() = certificates.configs;
    }
}

/// Every door's files, read and checked, not yet in force.
pub struct Certificates {
    configs: Vec<Option<Arc<ServerConfig>>>,
    leaves: Vec<(TlsSettings, x509::Facts)>,
}

impl Certificates {
    fn log_expiry(&self, now_unix_s: i64) {
        for (door, leaf) in &self.leaves {
            log_expiry(door, leaf, now_unix_s);
        }
    }
}

/// Reads every door's files from `settings`; every file that cannot be
/// used is one error, and then none is returned.
pub fn read_all(settings: &[Option<TlsSettings>]) -> Result<Certificates, Vec<String>> {
    let mut configs = Vec::with_capacity(settings.len());
    let mut errors = Vec::new();
    let mut leaves = Vec::new();
    for door in settings {
        let Some(door) = door else {
            configs.push(None);
            continue;
        };
        match load(door) {
            Ok(loaded) => {
                configs.push(Some(loaded.config));
                leaves.push((door.clone(), loaded.leaf));
            }
            Err(door_errors) => errors.extend(door_errors),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Certificates { configs, leaves })
}

/// Now, in seconds since the Unix epoch.
pub fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// What a finished handshake says of the client: `None` when it presented
/// no certificate, else what its (verified) certificate states.
pub fn client_certificate(connection: &rustls::ServerConnection) -> Option<x509::Facts> {
    let leaf = connection.peer_certificates()?.first()?;
    Some(x509::read(leaf))
}

/// A word of advice for a handshake failure whose cause is not plain from
/// the TLS library's words, or nothing.
pub fn handshake_hint(error: &std::io::Error) -> &'static str {
    // openssl 3.0 issues version 1 from `x509 -req` when the request has
    // no extension; webpki names the refusal only by its variant.
    if error.to_string().contains("UnsupportedCertVersion") {
        " (the certificate is X.509 version 1, which is not accepted: reissue it with an extension, such as openssl req ... -addext extendedKeyUsage=clientAuth and openssl x509 -req ... -copy_extensions copy)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_a_door_that_cannot_be_used_is_one_error() {
        let dir = std::env::temp_dir().join(format!("saguin-tls-door-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not-pem.pem");
        std::fs::write(&not_pem, "not a certificate\n").unwrap();
        let settings = TlsSettings {
            door: "broker.mqtt.listen.tcp[fleet]".into(),
            cert_file: not_pem.clone(),
            key_file: not_pem.clone(),
            min_version: TlsVersion::V1_2,
            client_ca_file: Some("/nonexistent/ca.pem".into()),
            require_certificate: true,
        };
        let errors = match load(&settings) {
            Ok(_) => panic!("a door with no certificate was accepted"),
            Err(errors) => errors,
        };
        let _ = std::fs::remove_dir_all(&dir);
        let p = not_pem.display();
        let door = "broker.mqtt.listen.tcp[fleet].tls";
        assert_eq!(errors.len(), 3, "{errors:#?}");
        assert!(errors[0].starts_with(&format!("{door}.cert_file {p}: holds no certificate")));
        assert!(errors[1].starts_with(&format!("{door}.key_file {p}: holds no private key")));
        assert!(errors[2].starts_with(&format!(
            "{door}.client_ca_file /nonexistent/ca.pem: cannot read it: "
        )));
        assert!(errors[2].ends_with(READABLE), "{errors:#?}");
    }
}
