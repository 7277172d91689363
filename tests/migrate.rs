//! `saguin migrate` on real inputs: Debian's shipped configuration, the
//! examples it ships, configurations written the way mosquitto's manual
//! writes them, a migration that fails (and writes nothing), and one that
//! runs under mosquitto and then under this broker with the same answers.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::certs::Authority;
use common::free_port;
use common::mosquitto::{have_mosquitto, Mosquitto};
use common::{check_config, connect_packet, BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, PubAck};

fn migrate(conf: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("migrate")
        .arg(conf)
        .arg(out)
        .output()
        .expect("run saguin migrate")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_string()
}

/// Migrates `conf` into `out`, asserting it succeeds, that the report has
/// a line for each option of each file in `files`, and that the result
/// passes `--check-config`. Returns the report.
fn migrated(conf: &Path, out: &Path, files: &[&Path]) -> String {
    let output = migrate(conf, out);
    let report = text(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{report}",
        text(&output.stderr)
    );
    for file in files {
        let options = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .count();
        let place = format!("{}:", file.canonicalize().unwrap().display());
        let lines = report
            .lines()
            .filter(|l| {
                l.strip_prefix(&place)
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count();
        assert_eq!(lines, options, "{}:\n{report}", file.display());
    }
    assert_eq!(
        std::fs::read_to_string(out.join("migration-report.txt")).unwrap(),
        report
            .lines()
            .filter(|l| !l.ends_with("read access to the directory"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    let config = std::fs::read_to_string(out.join("saguin.yaml")).unwrap();
    assert!(
        config.starts_with("# Written by `saguin migrate` from "),
        "{config}"
    );
    let checked = check_config(out.join("saguin.yaml"));
    assert!(
        checked.status.success(),
        "{}\n{config}",
        text(&checked.stderr)
    );
    report
}

/// The line of `report` about line `line` of `file`.
fn about(report: &str, file: &Path, line: usize) -> String {
    let place = format!("{}:{line}: ", file.canonicalize().unwrap().display());
    report
        .lines()
        .find(|l| l.starts_with(&place))
        .unwrap_or_else(|| panic!("no line for {place}\n{report}"))
        .to_string()
}

#[test]
fn debians_shipped_configuration_migrates_and_checks() {
    let conf = Path::new("/etc/mosquitto/mosquitto.conf");
    if !conf.exists() {
        eprintln!("\n*** SKIPPED debians_shipped_configuration_migrates_and_checks: {} is absent (apt-get install mosquitto) ***\n", conf.display());
        return;
    }
    let dir = TempDir::new("migrate-debian");
    let out = dir.path().join("etc-saguin");
    let report = migrated(conf, &out, &[conf]);
    let config = std::fs::read_to_string(out.join("saguin.yaml")).unwrap();
    // No listener: mosquitto's local-only door; persistence: a redb file.
    assert!(config.contains("address: \"127.0.0.1:1883\""), "{config}");
    assert!(config.contains("type: \"redb\""), "{config}");
    assert!(
        report.contains("(no listener): mosquitto 2.0 then listens on localhost"),
        "{report}"
    );
}

#[test]
fn the_shipped_examples_migrate_and_check() {
    let examples = Path::new("/usr/share/doc/mosquitto/examples");
    if !examples.join("mosquitto.conf").exists() {
        eprintln!("\n*** SKIPPED the_shipped_examples_migrate_and_check: {} is absent (apt-get install mosquitto) ***\n", examples.display());
        return;
    }
    let dir = TempDir::new("migrate-examples");
    // The example configuration is all comments: mosquitto's defaults.
    let conf = examples.join("mosquitto.conf");
    let report = migrated(&conf, &dir.path().join("defaults"), &[&conf]);
    assert!(report.contains("(no listener)"), "{report}");
    // The example password and acl files, named the way the manual does.
    let (pwfile, aclfile) = (
        examples.join("pwfile.example"),
        examples.join("aclfile.example"),
    );
    let conf = dir.path().join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener 1883\npassword_file {}\nacl_file {}\n",
            pwfile.display(),
            aclfile.display()
        ),
    )
    .unwrap();
    let out = dir.path().join("with-acl");
    let report = migrated(&conf, &out, &[&conf, &aclfile]);
    assert!(
        about(&report, &conf, 2).contains("(3 users: 3 $6$)"),
        "{report}"
    );
    assert!(
        about(&report, &aclfile, 2).contains("anonymous section: not carried"),
        "{report}"
    );
    assert!(
        about(&report, &aclfile, 5)
            .contains("became users: entry \"roger\" with roles [user-roger]"),
        "{report}"
    );
    assert!(
        about(&report, &aclfile, 9).contains("no $SYS tree"),
        "{report}"
    );
    assert!(
        about(&report, &aclfile, 6).contains("role user-roger"),
        "{report}"
    );
    let acl = std::fs::read_to_string(out.join("acl.yaml")).unwrap();
    assert!(acl.contains("topic: \"foo/bar\""), "{acl}");
    assert_eq!(
        std::fs::read_to_string(out.join("pwfile.example")).unwrap(),
        std::fs::read_to_string(&pwfile).unwrap()
    );
}

#[test]
fn listeners_tls_bridges_and_included_files_as_the_manual_writes_them() {
    if !common::have_tools(
        "listeners_tls_bridges_and_included_files",
        &["openssl"],
        "openssl",
    ) {
        return;
    }
    let dir = TempDir::new("migrate-manual");
    let d = dir.path();
    let ca = Authority::new(d, "ca");
    let (cert, key) = ca.server("server");
    let (bridge_cert, bridge_key) =
        ca.issue("bridge", "/CN=gw", Some("extendedKeyUsage=clientAuth"), 30);
    std::fs::create_dir(d.join("conf.d")).unwrap();
    let bridge = d.join("conf.d/bridge.conf");
    std::fs::write(
        &bridge,
        format!(
            "connection cloud\naddress mqtt.example.com:8883 backup.example.com:8883\nround_robin true\n\
             bridge_cafile {ca}\nbridge_certfile {bridge_cert}\nbridge_keyfile {bridge_key}\n\
             remote_username gw\nremote_password s3cret\ncleansession false\nkeepalive_interval 30\n\
             try_private true\nnotifications true\n\
             topic readings/# out 1 \"\" fleet/gw-1/\ntopic commands/# in 1 local/ fleet/gw-1/\n\
             topic alerts/# both 2\ntopic # both 0 mirror/ remote/\n",
            ca = ca.pem().display(),
            bridge_cert = bridge_cert.display(),
            bridge_key = bridge_key.display()
        ),
    )
    .unwrap();
    let conf = d.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "per_listener_settings true\n\
             listener 1883 127.0.0.1\nallow_anonymous true\n\
             listener 8883\nsocket_domain ipv4\ncertfile {cert}\nkeyfile {key}\ncafile {ca}\n\
             require_certificate true\nuse_identity_as_username true\ntls_version tlsv1.2\nmax_connections 500\n\
             listener 9001\nprotocol websockets\nallow_anonymous true\n\
             listener 0 {d}/mqtt.sock\nallow_anonymous true\n\
             persistence true\npersistence_location {d}/\nautosave_interval 60\n\
             max_inflight_messages 40\nmax_queued_messages 2000\nmax_queued_bytes 4194304\nmessage_size_limit 262144\n\
             max_keepalive 120\npersistent_client_expiration 2w\nretain_available true\n\
             log_type error\nlog_type information\nlog_dest stdout\npid_file /run/mosquitto/mosquitto.pid\n\
             sys_interval 10\nuser mosquitto\ninclude_dir conf.d\n",
            cert = cert.display(),
            key = key.display(),
            ca = ca.pem().display(),
            d = d.display()
        ),
    )
    .unwrap();
    let out = d.join("out");
    let report = migrated(&conf, &out, &[&conf, &bridge]);
    let config = std::fs::read_to_string(out.join("saguin.yaml")).unwrap();
    for wanted in [
        "name: \"port-1883\"",
        "address: \"127.0.0.1:1883\"",
        "allow_anonymous: true",
        "address: \"0.0.0.0:8883\"",
        "ws:",
        "address: \"0.0.0.0:9001\"",
        "unix:",
        "name: \"unix\"",
        "client_ca_file:",
        "min_version: \"1.2\"",
        "session_queue_bytes: 4194304",
        "max_message_size: 278528",
        "max_keepalive: \"120s\"",
        "max_session_expiry: \"14d\"",
        "log_level: \"info\"",
        "peer: \"tls://mqtt.example.com:8883\"",
        "client_id: \"cloud.",
        "topic: \"fleet/gw-1/readings/$#\"",
        "filter: \"fleet/gw-1/commands/#\"",
        "topic: \"local/commands/$#\"",
        "direction: \"both\"",
        "filter: \"remote/#\"",
        "topic: \"remote/$#\"",
    ] {
        assert!(config.contains(wanted), "{wanted} missing from:\n{config}");
    }
    // What could not be carried says so, and what to write instead.
    assert!(
        about(&report, &conf, 14).contains("differs: a browser page from another origin"),
        "{report}"
    );
    assert!(
        about(&report, &conf, 16).contains("became broker.mqtt.listen.unix[unix], path"),
        "{report}"
    );
    assert!(
        config.contains(&format!("path: \"{}/mqtt.sock\"", d.display())),
        "{config}"
    );
    assert!(
        about(&report, &bridge, 2).contains("not carried: backup.example.com:8883"),
        "{report}"
    );
    assert!(
        about(&report, &bridge, 8).contains("(hidden)") && !report.contains("s3cret"),
        "{report}"
    );
    assert!(
        about(&report, &conf, 12).contains("another listener has no bound"),
        "{report}"
    );
    assert!(
        about(&report, &conf, 18).contains("what mosquitto.db holds is carried into it"),
        "{report}"
    );
    assert!(
        about(&report, &conf, 30).contains("carried: the log goes to standard output"),
        "{report}"
    );
    assert!(
        about(&report, &conf, 31).contains("not carried: the Debian and OpenWrt services"),
        "{report}"
    );
}

#[test]
fn a_migration_that_fails_names_the_line_and_writes_nothing() {
    let dir = TempDir::new("migrate-fails");
    let d = dir.path();
    let passwd = d.join("passwd");
    std::fs::write(&passwd, "bob:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==\nbob2:plain\n").unwrap();
    let good = d.join("good.passwd");
    std::fs::write(&good, "bob:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==\n").unwrap();
    let acl = d.join("acl");
    std::fs::write(&acl, "user bob\ntopic read a/#\nsubscribe b\n").unwrap();
    let cases: Vec<(&str, String, String)> = vec![
        ("bad-value", "listener 1883\nallow_anonymous maybe\n".into(), "mosquitto.conf, line 2: allow_anonymous is true or false".into()),
        ("bad-hash", format!("listener 1883\npassword_file {}\n", passwd.display()), format!("{}, line 2: user \"bob2\": not a hash", passwd.display())),
        ("bad-acl", format!("listener 1883\npassword_file {}\nacl_file {}\n", good.display(), acl.display()), format!("{}, line 3: \"subscribe\" is not a line", acl.display())),
        ("bad-bridge", "listener 1883\nallow_anonymous true\nconnection up\naddress h\ntopic # sideways\n".into(), "mosquitto.conf, line 5: \"sideways\" is not a direction".into()),
        // The certificate does not exist: --check-config's own finding.
        ("no-certificate", "listener 8883\nallow_anonymous true\ncertfile /nonexistent/cert.pem\nkeyfile /nonexistent/key.pem\n".into(), "does not pass --check-config, so nothing was written".into()),
        ("nobody", "listener 1883\n".into(), "no listener can be carried over".into()),
    ];
    for (name, conf_text, wanted) in cases {
        let conf = d.join(format!("{name}.d")).join("mosquitto.conf");
        std::fs::create_dir(conf.parent().unwrap()).unwrap();
        std::fs::write(&conf, conf_text).unwrap();
        let out = d.join(format!("{name}-out"));
        let output = migrate(&conf, &out);
        let error = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {error}");
        assert!(
            error.starts_with("saguin migrate: ") && error.contains(&wanted),
            "{name}: {error}"
        );
        assert!(!out.exists(), "{name}: {} was written", out.display());
    }
    // Nothing half-made is left beside the destinations either.
    let leftovers: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .contains("migrating")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A destination holding files is never written over.
    let conf = d.join("ok.conf");
    std::fs::write(&conf, "listener 1883\nallow_anonymous true\n").unwrap();
    let taken = d.join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("saguin.yaml"), "mine\n").unwrap();
    let output = migrate(&conf, &taken);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("holds files already: the migration never overwrites"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(taken.join("saguin.yaml")).unwrap(),
        "mine\n"
    );
    // An empty one is used.
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    migrated(&conf, &empty, &[&conf]);
}

/// `mosquitto_pub`/`mosquitto_sub` with `args` at `port`: its exit status
/// and what it printed.
fn client(tool: &str, port: u16, args: &[&str]) -> (bool, String) {
    let output = Command::new(tool)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {tool}: {e}"));
    (output.status.success(), text(&output.stdout))
}

/// The commands a deployment's clients would run, each answer kept.
fn session(port: u16, restart: &mut dyn FnMut() -> u16) -> Vec<(bool, String)> {
    let alice = ["-u", "alice", "-P", "alice-pw"];
    let mut answers = Vec::new();
    let mut run = |tool: &str, port: u16, args: &[&str]| {
        let args: Vec<&str> = alice.iter().chain(args).copied().collect();
        answers.push(client(tool, port, &args));
    };
    // A retained value, and a persistent session subscribing and leaving.
    run(
        "mosquitto_pub",
        port,
        &["-q", "1", "-r", "-t", "state/boiler", "-m", "on"],
    );
    run(
        "mosquitto_sub",
        port,
        &["-c", "-i", "kept", "-q", "1", "-t", "jobs/#", "-E"],
    );
    run(
        "mosquitto_pub",
        port,
        &["-q", "1", "-t", "jobs/1", "-m", "while-away"],
    );
    // A wrong password and an unknown user are refused.
    answers.push(client(
        "mosquitto_pub",
        port,
        &["-u", "alice", "-P", "nope", "-t", "x", "-m", "x"],
    ));
    answers.push(client(
        "mosquitto_pub",
        port,
        &["-u", "mallory", "-P", "x", "-t", "x", "-m", "x"],
    ));
    let port = restart();
    // After a restart both come back.
    let mut run = |tool: &str, args: &[&str]| {
        let args: Vec<&str> = alice.iter().chain(args).copied().collect();
        answers.push(client(tool, port, &args));
    };
    run(
        "mosquitto_sub",
        &["-t", "state/boiler", "-C", "1", "-W", "10", "-v"],
    );
    run(
        "mosquitto_sub",
        &[
            "-c", "-i", "kept", "-q", "1", "-t", "jobs/#", "-C", "1", "-W", "10", "-v",
        ],
    );
    answers
}

#[test]
fn a_mosquitto_deployment_answers_alike_before_and_after_the_migration() {
    let test = "a_mosquitto_deployment_answers_alike_before_and_after_the_migration";
    if !have_mosquitto(test)
        || !common::have_mosquitto_clients(test)
        || !common::have_tools(test, &["mosquitto_passwd"], "mosquitto")
    {
        return;
    }
    let dir = TempDir::new("migrate-e2e");
    let d = dir.path();
    let data = d.join("data");
    std::fs::create_dir(&data).unwrap();
    // mosquitto, started as root, writes its database as its own user.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let passwd = d.join("passwd");
    let status = Command::new("mosquitto_passwd")
        .args(["-c", "-b"])
        .arg(&passwd)
        .args(["alice", "alice-pw"])
        .status()
        .unwrap();
    assert!(status.success());
    let port = free_port();
    let conf = format!(
        "listener {port} 127.0.0.1\npassword_file {}\npersistence true\npersistence_location {}/\nautosave_interval 1\n",
        passwd.display(),
        data.display()
    );
    let mut mosquitto = Some(Mosquitto::start(d, &conf, port));
    let mut restart = || {
        mosquitto.take().unwrap().stop();
        mosquitto = Some(Mosquitto::start(d, &conf, port));
        port
    };
    let before = session(port, &mut restart);
    // Stopped as a service manager stops it, so that its database holds
    // what it ended with: the migration carries that over.
    mosquitto.take().unwrap().stop();

    let out = d.join("migrated");
    let report = migrated(
        &d.join("mosquitto.conf"),
        &out,
        &[&d.join("mosquitto.conf")],
    );
    assert!(
        report.contains("keeping sessions and retained messages"),
        "{report}"
    );
    let config = std::fs::read_to_string(out.join("saguin.yaml"))
        .unwrap()
        .replace(&format!("127.0.0.1:{port}"), "127.0.0.1:0");
    // The mosquitto run's own database stays where it was; this broker
    // starts with its own file beside it, holding what mosquitto's held.
    assert!(
        config.contains(&format!("file_path: \"{}/saguin.redb\"", data.display())),
        "{config}"
    );
    let mut saguin = Some(BrokerProcess::start_with_config(&out, &config));
    let first = saguin.as_ref().unwrap().port;
    let mut restart = || {
        let mut old = saguin.take().unwrap();
        assert!(old.terminate().success());
        let broker = BrokerProcess::start_with_config(&out, &config);
        let port = broker.port;
        saguin = Some(broker);
        port
    };
    let after = session(first, &mut restart);
    assert_eq!(after, before, "mosquitto answered {before:?}");
    // The answers carry something: the retained value and the message kept
    // for the session while it was away both arrived.
    assert_eq!(before[5], (true, "state/boiler on\n".to_string()));
    assert_eq!(before[6], (true, "jobs/1 while-away\n".to_string()));
    assert!(!before[3].0 && !before[4].0, "{before:?}");
}

/// The next PUBLISH `client` is sent, acknowledged.
fn next_publish(client: &mut RawClient) -> (String, Vec<u8>) {
    match client.recv() {
        Received::Packet(Packet::Publish(publish)) => {
            if let Some(packet_id) = publish.packet_id {
                client.send(&Packet::Puback(PubAck {
                    packet_id,
                    ..PubAck::default()
                }));
            }
            (publish.topic, publish.payload)
        }
        other => panic!("expected a PUBLISH, got {other:?}"),
    }
}

#[test]
fn what_mosquitto_kept_in_its_database_carries_over() {
    let test = "what_mosquitto_kept_in_its_database_carries_over";
    if !have_mosquitto(test) || !common::have_mosquitto_clients(test) {
        return;
    }
    let dir = TempDir::new("migrate-db");
    let d = dir.path();
    let data = d.join("data");
    std::fs::create_dir(&data).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let port = free_port();
    let conf = format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\n",
        data.display()
    );
    let mosquitto = Mosquitto::start(d, &conf, port);
    // A durable session that subscribes and leaves, a retained value with
    // an MQTT 5 property, and a message owed to the session while away.
    let durable = ["-c", "-i", "durable", "-q", "1", "-t", "dev/+/cmd", "-E"];
    assert!(client("mosquitto_sub", port, &durable).0);
    let retained = [
        "-V",
        "5",
        "-q",
        "1",
        "-r",
        "-t",
        "state/lamp",
        "-m",
        "on",
        "-D",
        "publish",
        "content-type",
        "text/plain",
    ];
    assert!(client("mosquitto_pub", port, &retained).0);
    let owed = ["-q", "1", "-t", "dev/7/cmd", "-m", "while-away"];
    assert!(client("mosquitto_pub", port, &owed).0);
    // SIGTERM: mosquitto writes its database as it stops.
    mosquitto.stop();
    let db = data.join("mosquitto.db");
    assert!(db.exists(), "mosquitto wrote no database");

    let out = d.join("migrated");
    let conf_path = d.join("mosquitto.conf");
    let report = migrated(&conf_path, &out, &[&conf_path]);
    for line in [
        "retained values: 1 carried",
        "persistent sessions: 1 carried",
        "queued messages: 1 carried",
    ] {
        assert!(
            report.contains(&format!("{}: {line} (", db.display())),
            "{line}:\n{report}"
        );
    }
    assert!(data.join("saguin.redb").exists());
    let config = std::fs::read_to_string(out.join("saguin.yaml"))
        .unwrap()
        .replace(&format!("127.0.0.1:{port}"), "127.0.0.1:0");
    let saguin = BrokerProcess::start_with_config(&out, &config);
    let port = saguin.port;

    // A new subscriber is sent the retained value, its property kept.
    let (ok, got) = client(
        "mosquitto_sub",
        port,
        &[
            "-V", "5", "-t", "state/#", "-C", "1", "-W", "10", "-F", "%t %p %C",
        ],
    );
    assert_eq!((ok, got.as_str()), (true, "state/lamp on text/plain\n"));

    // The durable client finds its session, is sent what it was owed, and
    // a new publish reaches it through the subscription it made under
    // mosquitto, without subscribing again.
    let mut durable = RawClient::open(&saguin.address(), ProtocolVersion::V311);
    let mut connect = connect_packet(ProtocolVersion::V311, "durable");
    connect.clean_start = false;
    durable.send(&Packet::Connect(Box::new(connect)));
    match durable.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code.0, 0);
            assert!(connack.session_present, "the session was not carried");
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
    assert_eq!(
        next_publish(&mut durable),
        ("dev/7/cmd".to_string(), b"while-away".to_vec())
    );
    let fresh = ["-q", "1", "-t", "dev/9/cmd", "-m", "after"];
    assert!(client("mosquitto_pub", port, &fresh).0);
    assert_eq!(
        next_publish(&mut durable),
        ("dev/9/cmd".to_string(), b"after".to_vec())
    );
}

#[test]
fn a_damaged_mosquitto_database_fails_the_migration_and_nothing_is_written() {
    let dir = TempDir::new("migrate-bad-db");
    let d = dir.path();
    let conf = d.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener 1883\nallow_anonymous true\npersistence true\npersistence_location {}/\n",
            d.display()
        ),
    )
    .unwrap();
    let db = d.join("mosquitto.db");
    // mosquitto's magic and format 6, then a chunk longer than the file.
    let mut bytes = b"\x00\xb5\x00mosquitto db\x00\x00\x00\x00\x00\x00\x00\x06".to_vec();
    bytes.extend([0, 0, 0, 2, 0, 0, 1, 0, 1, 2, 3]);
    std::fs::write(&db, &bytes).unwrap();
    let out = d.join("migrated");
    let output = migrate(&conf, &out);
    assert_eq!(output.status.code(), Some(2));
    let said = text(&output.stderr);
    assert!(
        said.contains(&format!(
            "{}: at byte 23: chunk type 2 says 256 bytes",
            db.canonicalize().unwrap().display()
        )),
        "{said}"
    );
    assert!(!out.exists());
    assert!(!d.join("saguin.redb").exists());
    // Another format is refused by its number.
    bytes[22] = 7;
    std::fs::write(&db, &bytes).unwrap();
    let said = text(&migrate(&conf, &out).stderr);
    assert!(said.contains("is mosquitto persistence format 7"), "{said}");
    assert!(!out.exists() && !d.join("saguin.redb").exists());
}
