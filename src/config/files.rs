//! The files the walk names but leaves unread: each MQTT door's and each
//! bridge's certificate, key and authorities, and the acl_file.
//!
//! [`check`] reads them once the walk is over, whatever it found, so
//! `--check-config` ([`super::check`]) names every fault in them beside
//! the YAML's own. Each fault is a finding naming its key and file (and
//! line, for the acl_file) and what to do. The readers are the ones a
//! start uses (`net::tls`, `acl_file::load`), so a check refuses what a
//! start would.

use std::path::Path;

use super::acl_file;
use super::channels::ChannelConfig;
use super::findings::{syntax_finding, Findings};

/// Reads every file the walk noted. `channels` are the configuration's,
/// or `None` where they have mistakes of their own: the acl_file is then
/// only read and parsed, since naming a channel it grants would be judged
/// against a list known to be wrong.
pub(super) fn check(f: &mut Findings, channels: Option<&[ChannelConfig]>) {
    let named = std::mem::take(&mut f.named);
    let mut faults = Vec::new();
    for door in &named.door_tls {
        faults.extend(crate::net::tls::load(door).err().unwrap_or_default());
    }
    for (name, host, tls) in &named.bridge_tls {
        let loaded = crate::net::tls::client::load(name, host, tls);
        faults.extend(loaded.err().unwrap_or_default());
    }
    if let Some(path) = &named.acl_file {
        faults.extend(acl(path, channels));
    }
    for fault in faults {
        f.whole(fault);
    }
}

/// The acl_file's faults, each beginning `acl_file PATH:`.
fn acl(path: &Path, channels: Option<&[ChannelConfig]>) -> Vec<String> {
    let faults = match channels {
        Some(channels) => match acl_file::load(path, channels) {
            Ok(_) => return Vec::new(),
            Err(error) => error.findings,
        },
        None => match std::fs::read_to_string(path) {
            Err(e) => vec![acl_file::unreadable(&e)],
            Ok(text) => match serde_yaml::from_str::<serde_yaml::Value>(&text) {
                Ok(_) => return Vec::new(),
                Err(e) => vec![syntax_finding(&e)],
            },
        },
    };
    let file = path.display();
    faults
        .into_iter()
        .map(|fault| format!("acl_file {file}: {fault}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::config::{check, load};

    const SHA512_HUNTER2: &str = "$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==";

    const STORAGE: &str = "  storage:
    default: local
    default_retention_period: none
    default_retention_bytes: none
    providers:
      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
";

    /// A directory of its own for one test, removed when it ends.
    struct Dir(PathBuf);

    impl Dir {
        fn new(test: &str) -> Dir {
            let dir =
                std::env::temp_dir().join(format!("saguin-files-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn refused(path: &Path) -> Vec<String> {
        check(path).unwrap_err().findings
    }

    /// A file with a YAML mistake, a door whose three files are all
    /// missing, a bridge whose authority is missing and an acl_file that
    /// cannot be read: one check names all six.
    #[test]
    fn a_yaml_mistake_hides_no_file_and_each_file_is_its_own_finding() {
        let dir = Dir::new("all");
        let d = dir.0.display();
        let config = dir.write(
            "saguin.yaml",
            &format!(
                "broker:
  id: gw
  log_level: loud
  mqtt:
    acl_file: {d}/acl.yaml
    listen:
      tcp:
        name: fleet
        address: 127.0.0.1:0
        tls:
          cert_file: {d}/cert.pem
          key_file: {d}/key.pem
          client_ca_file: {d}/ca.pem
bridges:
  up:
    peer: tls://127.0.0.1:8883
    client_id: gw
    ca_file: {d}/peer-ca.pem
    topics:
      - {{filter: a/#, direction: out, topic: a/$#}}
"
            ),
        );
        let found = refused(&config);
        assert_eq!(found.len(), 6, "{found:#?}");
        assert!(
            found[0].starts_with("broker.log_level \"loud\""),
            "{found:#?}"
        );
        for (at, key, file) in [
            (1, "broker.mqtt.listen.tcp[fleet].tls.cert_file", "cert.pem"),
            (2, "broker.mqtt.listen.tcp[fleet].tls.key_file", "key.pem"),
            (
                3,
                "broker.mqtt.listen.tcp[fleet].tls.client_ca_file",
                "ca.pem",
            ),
            (4, "bridges.up.ca_file", "peer-ca.pem"),
        ] {
            let start = format!("{key} {d}/{file}: cannot read it: ");
            assert!(found[at].starts_with(&start), "{start} in {found:#?}");
            assert!(
                found[at].contains("give the path of a PEM file"),
                "{found:#?}"
            );
        }
        let acl = format!("acl_file {d}/acl.yaml: the file cannot be read: ");
        assert!(found[5].starts_with(&acl), "{found:#?}");
        // load leaves the files to their users: only the YAML's mistake.
        assert_eq!(load(&config).unwrap_err().findings.len(), 1);
    }

    #[test]
    fn the_acl_file_is_checked_against_the_channels_and_only_parsed_without_them() {
        let dir = Dir::new("acl");
        let acl = dir.write(
            "acl.yaml",
            "roles:\n  r:\n    - channel: nosuch\n      allow: [read]\nusers:\n  bob: [r]\n",
        );
        let passwd = dir.write("clients.passwd", &format!("bob:{SHA512_HUNTER2}\n"));
        let head = format!(
            "broker:\n  id: gw\n  mqtt:\n    password_file: {}\n    acl_file: {}\n{STORAGE}",
            passwd.display(),
            acl.display()
        );
        let channel = |filter: &str| {
            format!("{head}channels:\n  t:\n    type: append\n    filter: {filter}\n")
        };
        let config = dir.write("good.yaml", &channel("t/#"));
        let found = refused(&config);
        let line = format!("acl_file {}: line 3: roles.r[0].channel: \"nosuch\" is not a configured channel; the channels are t", acl.display());
        assert_eq!(found, vec![line]);
        // With a channel mistake the list is known wrong: the acl_file is
        // read and parsed, and judged against nothing.
        let config = dir.write("bad.yaml", &channel("5"));
        let found = refused(&config);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].starts_with("channels.t.filter"), "{found:#?}");
        dir.write("acl.yaml", "roles: [\n");
        let found = refused(&config);
        assert_eq!(found.len(), 2, "{found:#?}");
        let syntax = format!("acl_file {}: line ", acl.display());
        assert!(
            found[1].starts_with(&syntax) && found[1].contains("not valid YAML"),
            "{found:#?}"
        );
    }
}
