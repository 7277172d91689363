//! `saguin --check-config` over the real binary: one configuration with a
//! mistake in its YAML and one in each file it names, all reported by one
//! run, each finding naming its file (and line, where the file has lines)
//! and saying what to do; and the same configuration, each mistake fixed,
//! passing, so the findings are those mistakes and nothing else.

mod common;

use std::path::Path;

use common::certs::Authority;
use common::{check_config, have_tools, TempDir};

/// `hunter2`, as `mosquitto_passwd -H sha512` writes it.
const SHA512_HUNTER2: &str = "$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==";

/// A line of a file the test writes, and what replaces it once fixed.
struct Mistake {
    file: &'static str,
    wrong: String,
    right: String,
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write a test file");
}

fn configuration(d: &str) -> String {
    format!(
        "broker:
  id: gw
  log_level: verbose
  mqtt:
    password_file: {d}/clients.passwd
    acl_file: {d}/acl.yaml
    listen:
      tcp:
        name: fleet
        address: 127.0.0.1:0
        tls:
          cert_file: {d}/not-pem.pem
          key_file: {d}/door-key.pem
          client_ca_file: {d}/missing-ca.pem
  operations:
    password_file: {d}/operators.passwd
    listen:
      tcp:
        address: 127.0.0.1:0
        tls:
          cert_file: {d}/ops.pem
          key_file: {d}/door-key.pem
  storage:
    default: local
    default_retention_period: none
    default_retention_bytes: none
    providers:
      local: {{type: memory, max_bytes: 64MiB, snapshot_dir: none}}
channels:
  telemetry:
    type: append
    filter: telemetry/#
bridges:
  up:
    peer: tls://127.0.0.1:8883
    client_id: gw
    ca_file: {d}/ca.pem
    cert_file: {d}/bridge.pem
    key_file: {d}/ca.pem
    topics:
      - {{filter: telemetry/#, direction: out, topic: gw/$#}}
"
    )
}

#[test]
fn one_run_reports_a_mistake_in_the_yaml_and_in_every_file_it_names() {
    if !have_tools("check_config", &["openssl"], "openssl") {
        return;
    }
    let dir = TempDir::new("check-config-all");
    let d = dir.path().display().to_string();
    let ca = Authority::new(dir.path(), "ca");
    ca.server("door");
    ca.server("ops");
    ca.issue("bridge", "/CN=gw", Some("extendedKeyUsage=clientAuth"), 30);
    write(dir.path(), "not-pem.pem", "this is not a certificate\n");
    write(
        dir.path(),
        "clients.passwd",
        &format!("bob:{SHA512_HUNTER2}\nnocolon\n"),
    );
    write(
        dir.path(),
        "operators.passwd",
        &format!("oncall:{SHA512_HUNTER2}\nadmin\n"),
    );
    write(
        dir.path(),
        "acl.yaml",
        "roles:\n  reader:\n    - channel: telemetri\n      allow: [read]\nusers:\n  bob: [reader]\n",
    );
    let config = dir.path().join("saguin.yaml");
    write(dir.path(), "saguin.yaml", &configuration(&d));

    let output = check_config(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    // Each: the finding's start, naming its file (and line), and its fix.
    let expected = [
        (
            "broker.log_level \"verbose\": ".to_string(),
            "it is one of debug, info, warn or error",
        ),
        (
            format!("password file {d}/clients.passwd, line 2: "),
            "saguin --passwd FILE add USER writes one",
        ),
        (
            format!("broker.operations.password_file \"{d}/operators.passwd\": the file line 2: "),
            "write it with saguin --passwd",
        ),
        (
            format!("broker.operations.listen.tcp.tls.key_file {d}/door-key.pem: "),
            "it is not the key of the certificate in cert_file",
        ),
        (
            format!("broker.mqtt.listen.tcp[fleet].tls.cert_file {d}/not-pem.pem: "),
            "it should hold one or more -----BEGIN CERTIFICATE----- blocks",
        ),
        (
            format!("broker.mqtt.listen.tcp[fleet].tls.client_ca_file {d}/missing-ca.pem: cannot read it: "),
            "give the path of a PEM file that exists",
        ),
        (
            format!("bridges.up.key_file {d}/ca.pem: holds no private key"),
            "it should hold a -----BEGIN PRIVATE KEY-----",
        ),
        (
            format!("acl_file {d}/acl.yaml: line 3: roles.reader[0].channel: "),
            "\"telemetri\" is not a configured channel; the channels are telemetry",
        ),
    ];
    let findings: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("  - "))
        .collect();
    assert_eq!(findings.len(), expected.len(), "{stderr}");
    for (start, fix) in &expected {
        let finding = findings.iter().find(|f| f.starts_with(start.as_str()));
        let finding = finding.unwrap_or_else(|| panic!("no finding {start:?} in:\n{stderr}"));
        assert!(finding.contains(fix), "{fix:?} in {finding:?}");
    }

    // Every mistake fixed, the same configuration passes.
    let fixes = [
        Mistake {
            file: "saguin.yaml",
            wrong: "log_level: verbose".into(),
            right: "log_level: info".into(),
        },
        Mistake {
            file: "saguin.yaml",
            wrong: format!("cert_file: {d}/not-pem.pem"),
            right: format!("cert_file: {d}/door.pem"),
        },
        Mistake {
            file: "saguin.yaml",
            wrong: format!("client_ca_file: {d}/missing-ca.pem"),
            right: format!("client_ca_file: {d}/ca.pem"),
        },
        Mistake {
            file: "saguin.yaml",
            wrong: format!("cert_file: {d}/ops.pem\n          key_file: {d}/door-key.pem"),
            right: format!("cert_file: {d}/ops.pem\n          key_file: {d}/ops-key.pem"),
        },
        Mistake {
            file: "saguin.yaml",
            wrong: format!("key_file: {d}/ca.pem"),
            right: format!("key_file: {d}/bridge-key.pem"),
        },
        Mistake {
            file: "clients.passwd",
            wrong: "nocolon\n".into(),
            right: String::new(),
        },
        Mistake {
            file: "operators.passwd",
            wrong: "admin\n".into(),
            right: String::new(),
        },
        Mistake {
            file: "acl.yaml",
            wrong: "telemetri".into(),
            right: "telemetry".into(),
        },
    ];
    for fix in &fixes {
        let path = dir.path().join(fix.file);
        let text = std::fs::read_to_string(&path).expect("read a test file");
        assert!(text.contains(&fix.wrong), "{:?} in {}", fix.wrong, fix.file);
        write(dir.path(), fix.file, &text.replace(&fix.wrong, &fix.right));
    }
    let output = check_config(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("configuration is valid"), "{stdout}");
}
