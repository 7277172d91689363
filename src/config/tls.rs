//! A door's `tls` block: the certificate it serves and the authorities it
//! checks client certificates against.
//!
//! Only the shape is checked here; whether the files can be read and the
//! key belongs to the certificate is asked when the broker loads them
//! (`--check-config` included), by the network layer that owns them.

use std::path::PathBuf;

use serde_yaml::Value;

use super::findings::Findings;
use super::table::{table, Keys};
use crate::net::tls::{TlsSettings, TlsVersion};

const TLS_KEYS: Keys = Keys {
    supported: &[
        "cert_file",
        "key_file",
        "min_version",
        "client_ca_file",
        "require_certificate",
    ],
    not_yet: &[],
};

/// Reads the `tls` block at `path` of the door messages call `door_label`
/// (`None` when the door's name was refused).
pub(super) fn parse(
    f: &mut Findings,
    path: &str,
    value: &Value,
    door_label: Option<String>,
) -> Option<TlsSettings> {
    let t = table(f, path, value, &TLS_KEYS)?;
    let cert_file = required_file(f, path, t.get("cert_file"), "cert_file", "cert.pem");
    let key_file = required_file(f, path, t.get("key_file"), "key_file", "key.pem");
    let client_ca_file = match t.get("client_ca_file") {
        None => Some(None),
        Some(v) => file(f, &format!("{path}.client_ca_file"), v, "clients-ca.pem").map(Some),
    };
    let min_version = min_version(f, &format!("{path}.min_version"), t.get("min_version"));
    let require_path = format!("{path}.require_certificate");
    let require_certificate = match (t.get("require_certificate"), &client_ca_file) {
        (None, _) => Some(true),
        (Some(_), Some(None)) => {
            f.key(
                &require_path,
                "written where no client_ca_file names the authorities to check certificates against, it would demand certificates and verify none; add client_ca_file, or remove require_certificate",
            );
            None
        }
        (Some(Value::Bool(b)), _) => Some(*b),
        (Some(v), _) => {
            f.value(
                &require_path,
                v,
                "it is true (every client must present a certificate, the default) or false (a client without one falls through to the other ways in)",
            );
            None
        }
    };
    Some(TlsSettings {
        door: door_label?,
        cert_file: cert_file?,
        key_file: key_file?,
        min_version: min_version?,
        client_ca_file: client_ca_file?,
        require_certificate: require_certificate?,
    })
}

fn required_file(
    f: &mut Findings,
    path: &str,
    value: Option<&Value>,
    key: &str,
    example: &str,
) -> Option<PathBuf> {
    let key_path = format!("{path}.{key}");
    let Some(value) = value else {
        f.key(
            path,
            format!("a tls block needs {key}, such as {key}: /etc/saguin/tls/{example}; nothing is generated"),
        );
        return None;
    };
    file(f, &key_path, value, example)
}

/// An absolute path to a file, so what a door serves does not depend on
/// the directory the broker was started from.
pub(super) fn file(f: &mut Findings, path: &str, value: &Value, example: &str) -> Option<PathBuf> {
    let Value::String(text) = value else {
        f.value(
            path,
            value,
            format!("it is an absolute file path, such as /etc/saguin/tls/{example}"),
        );
        return None;
    };
    let last = text.rsplit('/').next().unwrap_or("");
    let why = if !text.starts_with('/') {
        format!("it must be absolute, so what it names does not depend on where the broker was started; write it from /, such as /etc/saguin/tls/{example}")
    } else if text.contains('\0') {
        "a path holds no NUL character".to_string()
    } else if last.is_empty() || last == "." || last == ".." {
        format!("it names a directory, not a file; end it with a file name, such as /etc/saguin/tls/{example}")
    } else {
        return Some(PathBuf::from(text));
    };
    f.value(path, value, why);
    None
}

/// `1.2` (the default) or `1.3`, quoted or not: YAML reads a bare `1.2` as
/// a number.
fn min_version(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<TlsVersion> {
    let Some(value) = value else {
        return Some(TlsVersion::V1_2);
    };
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    match text.as_str() {
        "1.2" => Some(TlsVersion::V1_2),
        "1.3" => Some(TlsVersion::V1_3),
        _ => {
            f.value(
                path,
                value,
                "it is the lowest TLS version the door accepts, 1.2 or 1.3; nothing below 1.2 can be chosen",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_contains;
    use crate::config::{parse, Config, ConfigError};
    use crate::net::tls::TlsVersion;

    fn with_tls(tls: &str) -> Result<Config, ConfigError> {
        let tls: String = tls.lines().map(|l| format!("            {l}\n")).collect();
        parse(
            &format!(
                "broker:\n  id: edge-1\n  mqtt:\n    listen:\n      tcp:\n        - name: local\n          address: 127.0.0.1:1883\n        - name: fleet\n          address: 0.0.0.0:8883\n          tls:\n{tls}"
            ),
            "saguin.yaml",
        )
    }

    fn refused(tls: &str) -> String {
        with_tls(tls).unwrap_err().findings.join("\n")
    }

    #[test]
    fn a_tls_block_is_read_with_its_defaults() {
        let config =
            with_tls("cert_file: /etc/saguin/tls/cert.pem\nkey_file: /etc/saguin/tls/key.pem")
                .unwrap();
        let doors = &config.broker.mqtt.doors;
        assert_eq!(doors[0].tls, None);
        let tls = doors[1].tls.as_ref().unwrap();
        assert_eq!(tls.door, "broker.mqtt.listen.tcp[fleet]");
        assert_eq!(tls.min_version, TlsVersion::V1_2);
        assert_eq!(tls.client_ca_file, None);
        assert!(tls.require_certificate);

        let config = with_tls(
            "cert_file: /c.pem\nkey_file: /k.pem\nmin_version: 1.3\nclient_ca_file: /ca.pem\nrequire_certificate: false",
        )
        .unwrap();
        let tls = config.broker.mqtt.doors[1].tls.clone().unwrap();
        assert_eq!(tls.min_version, TlsVersion::V1_3);
        assert_eq!(tls.client_ca_file.unwrap().to_str(), Some("/ca.pem"));
        assert!(!tls.require_certificate);
    }

    #[test]
    fn a_lone_door_is_named_after_its_kind() {
        let config = parse(
            "broker:\n  id: edge-1\n  mqtt:\n    listen:\n      tcp:\n        address: 0.0.0.0:8883\n        tls:\n          cert_file: /c.pem\n          key_file: /k.pem\n",
            "saguin.yaml",
        )
        .unwrap();
        let tls = config.broker.mqtt.doors[0].tls.as_ref().unwrap();
        assert_eq!(tls.door, "broker.mqtt.listen.tcp");
    }

    #[test]
    fn every_shape_mistake_is_named() {
        let text =
            refused("cert_file: tls/cert.pem\nmin_version: \"1.1\"\nrequire_certificate: true");
        assert_contains(
            &text,
            &[
                "broker.mqtt.listen.tcp[1].tls.cert_file \"tls/cert.pem\": it must be absolute",
                "broker.mqtt.listen.tcp[1].tls: a tls block needs key_file",
                "min_version \"1.1\": it is the lowest TLS version",
                "broker.mqtt.listen.tcp[1].tls.require_certificate: written where no client_ca_file",
            ],
        );
        let text = refused(
            "cert_file: /c.pem\nkey_file: /tls/\nclient_ca_file: /ca.pem\nrequire_certificate: \"yes\"",
        );
        assert_contains(
            &text,
            &[
                "key_file \"/tls/\": it names a directory",
                "require_certificate \"yes\": it is true",
            ],
        );
    }
}
