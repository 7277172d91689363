//! What `broker.mqtt.acl_file` needs beside it: something that names each
//! client - a password file, a TLS door's `client_ca_file`, whose
//! certificates carry the name, or a Unix door's `proxy_protocol`, whose
//! proxy names the certificates it verified. Its rules are about identities, so a
//! broker that checks none would be governed by a file that governs
//! nobody; and a client nothing names is the empty name, which a `*` user
//! pattern matches.

use std::path::Path;

use super::authentication::AuthenticationKeys;
use super::findings::Findings;
use super::listen::MqttDoor;
use crate::auth::DoorRule;
use crate::net::Listen;

/// Whether `door` takes a client's name from a verified certificate: one
/// its own handshake verifies, or one a proxy in front names.
fn certifies(door: &MqttDoor) -> bool {
    let proxied = matches!(
        door.listen,
        Listen::Unix {
            proxy_protocol: true,
            ..
        }
    );
    proxied
        || door
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca_file.is_some())
}

/// Refuses an acl_file with nothing that names a client, and
/// `allow_anonymous: true` written beside one. `rules` are the doors'
/// settled rules, in the order of `doors`.
pub(super) fn check(
    f: &mut Findings,
    acl_file: Option<&Path>,
    broker: &AuthenticationKeys,
    rules: &[DoorRule],
    doors: &[MqttDoor],
) {
    if acl_file.is_none() {
        return;
    }
    let names_someone = rules.iter().any(|rule| rule.password_file.is_some());
    if !names_someone && !doors.iter().any(certifies) {
        f.key(
            "broker.mqtt.acl_file",
            "an authorization file needs something that names each client, and no password_file \
             is configured for the broker or any door, nor a client_ca_file on a TLS door or \
             proxy_protocol on a Unix door, so its rules would govern nobody; set \
             broker.mqtt.password_file (saguin --passwd writes one) or a door's \
             tls.client_ca_file, or remove acl_file",
        );
    }
    let said_true = |keys: &AuthenticationKeys| keys.allow_anonymous == Some(true);
    let keys = std::iter::once(("broker.mqtt.allow_anonymous".to_string(), broker)).chain(
        doors.iter().map(|door| {
            let key = format!(
                "broker.mqtt.listen.{} ({}).allow_anonymous",
                door.kind(),
                door.name
            );
            (key, &door.authentication)
        }),
    );
    for (key, _) in keys.filter(|(_, keys)| said_true(keys)) {
        f.key(
            &key,
            "true beside broker.mqtt.acl_file admits clients nothing names, and a \"*\" user \
             pattern would grant them its rights; remove allow_anonymous (a door with a \
             password_file then refuses clients without a user name), or remove acl_file",
        );
    }
}

/// A warning for each door that, beside an acl_file, admits clients that
/// neither a password file checks nor a required certificate names: such a
/// client is the empty name, or, where `trust_unchecked_user_names` says
/// so, the name it states, taken unchecked.
pub(super) fn unidentified_doors(
    acl_file: Option<&Path>,
    rules: &[DoorRule],
    doors: &[MqttDoor],
) -> Vec<String> {
    if acl_file.is_none() {
        return Vec::new();
    }
    // A proxied client with no certificate is let in as one without, so
    // only a TLS door of this broker's own can demand one.
    let demands_certificate = |door: &MqttDoor| {
        door.tls
            .as_ref()
            .is_some_and(|t| t.client_ca_file.is_some() && t.require_certificate)
    };
    rules
        .iter()
        .zip(doors)
        .filter(|(rule, door)| rule.password_file.is_none() && !demands_certificate(door))
        .map(|(rule, door)| {
            let stated = match rule.trusts_unchecked_names {
                true => {
                    "a user name one states is its identity, unchecked (trust_unchecked_user_names)"
                }
                false => "so is one that states a user name, which nothing checks",
            };
            format!(
                "broker.mqtt.listen.{} ({}): no password_file checks the clients this door \
                 admits, so beside broker.mqtt.acl_file one without a user name is the empty \
                 name and gets what a \"*\" pattern grants, and {stated}; give the door a \
                 password_file or a tls block whose client_ca_file every client must pass, or \
                 remove the door",
                door.kind(),
                rule.door
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, Config, ConfigError};

    const USERS: &str = "bob:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==\n";

    /// A password file in a directory of the test's own.
    fn password_file(test: &str) -> String {
        let dir = std::env::temp_dir().join(format!("saguin-aclid-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("clients.passwd");
        std::fs::write(&path, USERS).unwrap();
        path.display().to_string()
    }

    /// `broker.mqtt` with an acl_file, `broker` keys and two doors, the
    /// first with `fleet` keys of its own.
    fn config(broker: &str, fleet: &str) -> Result<Config, ConfigError> {
        let text = format!(
            "broker:\n  id: a\n  mqtt:\n    acl_file: /etc/saguin/acl.yaml\n{broker}    listen:\n      tcp:\n        - name: fleet\n          address: 0.0.0.0:1883\n{fleet}        - name: local\n          address: 127.0.0.1:1884\n"
        );
        parse(&text, "saguin.yaml")
    }

    fn findings(broker: &str, fleet: &str) -> String {
        config(broker, fleet).unwrap_err().findings.join("\n")
    }

    #[test]
    fn an_acl_file_with_nothing_to_authenticate_is_refused() {
        let found = findings("", "");
        assert!(
            found.starts_with("broker.mqtt.acl_file: an authorization file needs something that names each client"),
            "{found}"
        );
        assert!(found.contains("set broker.mqtt.password_file"), "{found}");
    }

    #[test]
    fn allow_anonymous_true_beside_an_acl_file_is_refused_where_written() {
        let file = password_file("anon");
        let broker = findings(
            &format!("    password_file: {file}\n    allow_anonymous: true\n"),
            "",
        );
        assert!(
            broker.starts_with("broker.mqtt.allow_anonymous: true beside broker.mqtt.acl_file"),
            "{broker}"
        );
        let door = findings(
            &format!("    password_file: {file}\n"),
            "          allow_anonymous: true\n",
        );
        assert!(
            door.starts_with("broker.mqtt.listen.tcp (fleet).allow_anonymous: true beside"),
            "{door}"
        );
        assert!(door.contains("remove allow_anonymous"), "{door}");
    }

    #[test]
    fn a_door_no_password_file_guards_is_warned_about() {
        let file = password_file("warn");
        let guarded = config(&format!("    password_file: {file}\n"), "").unwrap();
        assert!(guarded.broker.mqtt.warnings().is_empty());
        let open = config("", &format!("          password_file: {file}\n")).unwrap();
        let warnings = open.broker.mqtt.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("broker.mqtt.listen.tcp (local): no password_file checks"),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("give the door a password_file"));
    }

    #[test]
    fn a_door_naming_clients_by_certificate_satisfies_an_acl_file() {
        let tls = |require: &str| {
            format!(
                "          tls:\n            cert_file: /etc/saguin/cert.pem\n            key_file: /etc/saguin/key.pem\n            client_ca_file: /etc/saguin/ca.pem\n{require}"
            )
        };
        let certified = config("", &tls("")).unwrap();
        let warnings = certified.broker.mqtt.warnings();
        assert_eq!(warnings.len(), 1, "only the local door: {warnings:?}");
        assert!(warnings[0].contains("(local)"), "{warnings:?}");
        // A certificate a client may go without names nobody on its own.
        let optional = config("", &tls("            require_certificate: false\n")).unwrap();
        assert_eq!(optional.broker.mqtt.warnings().len(), 2);
    }
}
