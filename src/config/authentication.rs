//! `password_file` and `allow_anonymous`, under `broker.mqtt` and on a
//! door, where they win; and the rule each door ends up with.
//!
//! A door naming its own file admits only that file's users unless it also
//! writes `allow_anonymous`. Unwritten, `allow_anonymous` follows from the
//! file: none admits everybody, one admits whom it names. `false` with no
//! file is refused: a door nobody can pass is never what was meant.

use std::path::PathBuf;

use serde_yaml::Value;

use super::findings::Findings;
use super::table::Table;
use crate::auth::{Authentication, DoorRule};

/// The two keys as written in one place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthenticationKeys {
    pub password_file: Option<PathBuf>,
    pub allow_anonymous: Option<bool>,
}

/// Reads both keys from the block at `path`. `None` once a finding is made.
pub(super) fn keys(f: &mut Findings, path: &str, t: &Table<'_>) -> Option<AuthenticationKeys> {
    let password_file = t
        .get("password_file")
        .map(|v| password_file(f, &format!("{path}.password_file"), v));
    let allow_anonymous = match t.get("allow_anonymous") {
        None => Some(None),
        Some(Value::Bool(b)) => Some(Some(*b)),
        Some(v) => {
            f.value(
                &format!("{path}.allow_anonymous"),
                v,
                "it is true or false; omit it to admit clients without a user name only where no password_file applies",
            );
            None
        }
    };
    Some(AuthenticationKeys {
        password_file: match password_file {
            None => None,
            Some(read) => Some(read?),
        },
        allow_anonymous: allow_anonymous?,
    })
}

fn password_file(f: &mut Findings, path: &str, value: &Value) -> Option<PathBuf> {
    let why = match value {
        Value::String(text) if text.starts_with('/') && !text.contains('\0') => {
            return Some(PathBuf::from(text));
        }
        Value::String(_) => "it must be absolute, so the broker reads the same file wherever it is started; write it from /, such as /etc/saguin/clients.passwd",
        _ => "it is the absolute path of a password file in Mosquitto's format, such as /etc/saguin/clients.passwd; saguin --passwd writes one",
    };
    f.value(path, value, why);
    None
}

/// `broker.mqtt.trust_unchecked_user_names`: false when absent.
pub(super) fn trust_unchecked_user_names(f: &mut Findings, value: Option<&Value>) -> Option<bool> {
    match value {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            f.value(
                "broker.mqtt.trust_unchecked_user_names",
                v,
                "it is true or false; omit it so that a user name no password_file checks names nobody",
            );
            None
        }
    }
}

/// A door as its authentication keys are judged: its kind, its name and
/// the keys written on it.
pub(super) type DoorKeys<'a> = (&'a str, &'a str, &'a AuthenticationKeys);

/// Each door's rule, in door order, from the broker's keys and each
/// door's name and keys. Assumes a validated configuration.
pub(super) fn door_rules<'a>(
    broker: &AuthenticationKeys,
    trust_unchecked_user_names: bool,
    doors: impl Iterator<Item = DoorKeys<'a>>,
) -> Vec<DoorRule> {
    doors
        .map(|(_, name, own)| DoorRule {
            trusts_unchecked_names: trust_unchecked_user_names,
            ..rule(broker, name, own)
        })
        .collect()
}

/// A warning for each door where `trust_unchecked_user_names` takes a
/// stated user name as the client's identity: any client there may be
/// whoever it says, with every right the acl_file gives that name.
pub(super) fn trusted_names(rules: &[DoorRule]) -> Vec<String> {
    rules
        .iter()
        .filter(|rule| rule.trusts_unchecked_names && rule.password_file.is_none())
        .map(|rule| {
            format!(
                "broker.mqtt.trust_unchecked_user_names: door {:?} has no password_file, so the user \
                 name a client states there is taken as its identity unchecked, and any client \
                 may be whoever it says; give the door a password_file, or remove the key so that \
                 such a name names nobody",
                rule.door
            )
        })
        .collect()
}

fn rule(broker: &AuthenticationKeys, name: &str, own: &AuthenticationKeys) -> DoorRule {
    let password_file = own
        .password_file
        .clone()
        .or_else(|| broker.password_file.clone());
    // A door with a file of its own does not inherit the broker's answer.
    let allow_anonymous = match (own.allow_anonymous, &own.password_file) {
        (Some(allow), _) => allow,
        (None, Some(_)) => false,
        (None, None) => broker.allow_anonymous.unwrap_or(password_file.is_none()),
    };
    DoorRule {
        door: name.to_string(),
        password_file,
        allow_anonymous,
        trusts_unchecked_names: false,
    }
}

/// Refuses a door nobody could pass, and reads every password file so a
/// fault in one is reported with the rest of the configuration's. `rules`
/// are [`door_rules`] of `doors`.
pub(super) fn check<'a>(
    f: &mut Findings,
    rules: &[DoorRule],
    doors: impl Iterator<Item = DoorKeys<'a>>,
) {
    let mut passable = true;
    for (rule, (kind, name, own)) in rules.iter().zip(doors) {
        if rule.allow_anonymous || rule.password_file.is_some() {
            continue;
        }
        let key = if own.allow_anonymous.is_some() {
            format!("broker.mqtt.listen.{kind} ({name}).allow_anonymous")
        } else {
            "broker.mqtt.allow_anonymous".to_string()
        };
        f.key(
            &key,
            format!(
                "false with no password_file leaves door {name:?} admitting nobody; name a password_file beside it, or remove allow_anonymous"
            ),
        );
        passable = false;
    }
    if passable {
        for error in Authentication::load(rules).err().unwrap_or_default() {
            f.whole(error.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::auth::DoorRule;
    use crate::config::{parse, ConfigError};

    const USERS: &str = "bob:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==\n";

    /// A password file in a directory of the test's own.
    fn password_file(test: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("saguin-cfg-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("clients.passwd");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn config(mqtt: &str) -> Result<Vec<DoorRule>, ConfigError> {
        let text = format!("broker:\n  id: a\n  mqtt:\n{mqtt}");
        parse(&text, "saguin.yaml").map(|c| c.broker.mqtt.door_rules())
    }

    fn two_doors(broker: &str, fleet: &str) -> String {
        format!(
            "{broker}    listen:\n      tcp:\n        - name: fleet\n          address: 0.0.0.0:1883\n{fleet}        - name: local\n          address: 127.0.0.1:1884\n"
        )
    }

    fn rule(door: &str, file: Option<&Path>, allow_anonymous: bool) -> DoorRule {
        DoorRule {
            door: door.into(),
            password_file: file.map(Path::to_path_buf),
            allow_anonymous,
            trusts_unchecked_names: false,
        }
    }

    #[test]
    fn a_mistake_beside_the_doors_hides_no_password_file_fault() {
        let file = password_file("beside", &format!("nocolon\n{USERS}:x\n"));
        let mqtt = format!(
            "    password_file: {}\n    min_protocol_version: 4\n",
            file.display()
        );
        let findings = config(&mqtt).unwrap_err().findings;
        assert_eq!(findings.len(), 3, "{findings:#?}");
        assert!(findings[0].starts_with("broker.mqtt.min_protocol_version 4"));
        let at = |line: usize| format!("password file {}, line {line}: ", file.display());
        assert!(findings[1].starts_with(&at(1)), "{findings:#?}");
        assert!(findings[2].starts_with(&at(3)), "{findings:#?}");
    }

    #[test]
    fn unwritten_allow_anonymous_follows_the_file() {
        let file = password_file("follows", USERS);
        let f = file.display();
        assert_eq!(
            config(&two_doors("", "")).unwrap(),
            [rule("fleet", None, true), rule("local", None, true)]
        );
        assert_eq!(
            config(&two_doors(&format!("    password_file: {f}\n"), "")).unwrap(),
            [
                rule("fleet", Some(&file), false),
                rule("local", Some(&file), false)
            ]
        );
    }

    #[test]
    fn a_door_with_its_own_file_does_not_inherit_the_broker_answer() {
        let file = password_file("own", USERS);
        let f = file.display();
        let text = two_doors(
            "    allow_anonymous: true\n",
            &format!("          password_file: {f}\n"),
        );
        assert_eq!(
            config(&text).unwrap(),
            [rule("fleet", Some(&file), false), rule("local", None, true)]
        );
        // Written on the door, it wins either way.
        let text = two_doors(
            &format!("    password_file: {f}\n    allow_anonymous: false\n"),
            "          allow_anonymous: true\n",
        );
        assert_eq!(
            config(&text).unwrap(),
            [
                rule("fleet", Some(&file), true),
                rule("local", Some(&file), false)
            ]
        );
    }

    fn findings(text: &str) -> String {
        config(text).unwrap_err().findings.join("\n")
    }

    #[test]
    fn false_with_no_file_is_refused_naming_the_key() {
        let broker = findings(&two_doors("    allow_anonymous: false\n", ""));
        assert!(
            broker.starts_with("broker.mqtt.allow_anonymous: false with no password_file leaves door \"fleet\" admitting nobody"),
            "{broker}"
        );
        let door = findings(&two_doors("", "          allow_anonymous: false\n"));
        assert!(
            door.starts_with("broker.mqtt.listen.tcp (fleet).allow_anonymous: false"),
            "{door}"
        );
    }

    #[test]
    fn bad_values_are_refused() {
        let relative = findings("    password_file: clients.passwd\n");
        assert!(
            relative.contains("broker.mqtt.password_file \"clients.passwd\": it must be absolute"),
            "{relative}"
        );
        let word = findings("    allow_anonymous: yes please\n");
        assert!(
            word.contains("broker.mqtt.allow_anonymous \"yes please\": it is true or false"),
            "{word}"
        );
    }

    #[test]
    fn a_password_file_that_does_not_read_is_refused_naming_its_line() {
        let file = password_file("broken", &format!("{USERS}\nbob:{}", &USERS[4..]));
        let found = findings(&format!("    password_file: {}\n", file.display()));
        assert_eq!(
            found,
            format!(
                "password file {}, lines 1 and 3: user \"bob\" is named twice; only one of its passwords could be the one checked, so delete one line",
                file.display()
            )
        );
    }
}
