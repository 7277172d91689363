//! Who may connect, through the real binary: password files written by
//! Debian's `mosquitto_passwd` and by `saguin --passwd`, checked by stock
//! clients on both protocols, two doors with different answers, startup
//! refusals, and SIGUSR1 re-reading the files.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use common::{
    free_port, have_mosquitto_clients, have_tools, BrokerProcess, RawClient, Received, TempDir,
    WAIT,
};
use saguin::codec::{Packet, ProtocolVersion, ReasonCode};

/// What `mosquitto_pub` exits with: the CONNACK's code when refused.
const ADMITTED: i32 = 0;
const REFUSED_V311: i32 = 4;
const REFUSED_V5: i32 = 0x86;

/// The clients, and the broker with its `mosquitto_passwd`.
fn have_mosquitto(test: &str) -> bool {
    have_mosquitto_clients(test)
        && have_tools(test, &["mosquitto", "mosquitto_passwd"], "mosquitto")
}

/// Publishes one message as `user` with `password` (either may be absent)
/// and returns `mosquitto_pub`'s exit code.
fn publish_as(port: u16, version: &str, user: Option<&str>, password: Option<&str>) -> i32 {
    let mut command = Command::new("mosquitto_pub");
    command.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-V", version]);
    command.args(["-t", "auth/test", "-m", "hello", "-q", "1"]);
    if let Some(user) = user {
        command.args(["-u", user]);
    }
    if let Some(password) = password {
        command.args(["-P", password]);
    }
    let output = command.stderr(Stdio::null()).output().unwrap();
    output.status.code().expect("mosquitto_pub exited")
}

/// Writes a password file with `mosquitto_passwd`: alice with PBKDF2 (its
/// default, `$7$`) and bob with SHA-512 (`$6$`).
fn mosquitto_passwd_file(dir: &Path) -> PathBuf {
    let file = dir.join("clients.passwd");
    let path = file.to_str().unwrap();
    let made = |args: &[&str]| {
        let status = Command::new("mosquitto_passwd")
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "mosquitto_passwd {args:?}");
    };
    made(&["-c", "-b", path, "alice", "wonderland"]);
    made(&["-H", "sha512", "-b", path, "bob", "builder"]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("alice:$7$") && text.contains("bob:$6$"),
        "{text}"
    );
    file
}

/// `saguin --passwd FILE ARGS...`, the password on standard input.
fn saguin_passwd(file: &Path, args: &[&str], password: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--passwd")
        .arg(file)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that reads no password may have exited already.
    let _ = writeln!(child.stdin.take().unwrap(), "{password}");
    child.wait_with_output().unwrap()
}

/// Two doors: `fleet` answers by the broker's password file; `local` also
/// admits clients that offer no user name.
fn two_doors(dir: &Path, password_file: &Path) -> BrokerProcess {
    two_doors_with(dir, password_file, "")
}

/// [`two_doors`], with `broker_yaml` (indented by two spaces) under `broker:`.
fn two_doors_with(dir: &Path, password_file: &Path, broker_yaml: &str) -> BrokerProcess {
    let config = format!(
        "broker:\n  id: test\n  log_level: debug\n{broker_yaml}  mqtt:\n    password_file: {}\n    listen:\n      tcp:\n        - name: fleet\n          address: 127.0.0.1:0\n        - name: local\n          address: 127.0.0.1:0\n          allow_anonymous: true\n",
        password_file.display()
    );
    BrokerProcess::start_with_config(dir, &config)
}

#[test]
fn mosquitto_passwd_users_are_admitted_and_every_other_credential_refused() {
    if !have_mosquitto("mosquitto_passwd_users_are_admitted_and_every_other_credential_refused") {
        return;
    }
    let dir = TempDir::new("auth-mosquitto-file");
    let file = mosquitto_passwd_file(dir.path());
    let mut broker = two_doors(dir.path(), &file);
    let fleet = broker.door_port("fleet");
    let local = broker.door_port("local");
    for (version, refused) in [("mqttv311", REFUSED_V311), ("mqttv5", REFUSED_V5)] {
        for port in [fleet, local] {
            assert_eq!(
                publish_as(port, version, Some("alice"), Some("wonderland")),
                ADMITTED
            );
            assert_eq!(
                publish_as(port, version, Some("bob"), Some("builder")),
                ADMITTED
            );
            assert_eq!(
                publish_as(port, version, Some("alice"), Some("builder")),
                refused
            );
            assert_eq!(
                publish_as(port, version, Some("carol"), Some("wonderland")),
                refused
            );
            assert_eq!(publish_as(port, version, Some("bob"), None), refused);
        }
        // No user name: the door decides.
        assert_eq!(publish_as(fleet, version, None, None), refused, "{version}");
        assert_eq!(
            publish_as(local, version, None, None),
            ADMITTED,
            "{version}"
        );
    }
    // The log says which refusal it was, and never the password.
    broker.wait_for_log("as user \"alice\" on door \"fleet\": its password is wrong");
    broker
        .wait_for_log("as user \"carol\" on door \"fleet\": its user name is in no password file");
    broker
        .wait_for_log("as user \"bob\" on door \"fleet\": it offered a user name and no password");
    broker.wait_for_log("as user \"-\" on door \"fleet\": it offered no user name");
    assert!(
        !broker
            .log_lines
            .iter()
            .any(|l| l.contains("builder") || l.contains("wonderland")),
        "a password reached the log"
    );
}

/// "s3cret" at mosquitto 2.1's argon2id parameters (46 MiB, one pass, a
/// 64-byte digest), made by libargon2, the library mosquitto 2.1 calls:
/// `echo -n s3cret | argon2 saguin-salt-0001 -id -t 1 -k 47104 -p 1 -l 64 -e`.
/// Debian's mosquitto 2.0 writes no argon2id.
const ARGON2ID_S3CRET: &str = "$argon2id$v=19$m=47104,t=1,p=1$c2FndWluLXNhbHQtMDAwMQ$O0thE2KRj4nGDn7Xv3Jena35svdruwzVMEC+Oq+NLunUieJY0fLXnrACtqxVUWcysE7U+ikiRsVT7gcsmFA+Rg";

#[test]
fn every_hash_mosquitto_writes_admits_its_user_and_refuses_a_wrong_password() {
    let test = "every_hash_mosquitto_writes_admits_its_user_and_refuses_a_wrong_password";
    if !have_mosquitto(test) {
        return;
    }
    let dir = TempDir::new("auth-every-hash");
    // alice: $7$ at 101 iterations (mosquitto 2.0's default); bob: $6$.
    let file = mosquitto_passwd_file(dir.path());
    let path = file.to_str().unwrap();
    // dora: $7$ at 210,000 iterations, as mosquitto 2.1 is said to write.
    let status = Command::new("mosquitto_passwd")
        .args(["-I", "210000", "-b", path, "dora", "d0ra"])
        .status()
        .unwrap();
    assert!(status.success());
    let mut text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("dora:$7$210000$"), "{text}");
    text.push_str(&format!("erin:{ARGON2ID_S3CRET}\n"));
    std::fs::write(&file, text).unwrap();
    // A check of 210,000 iterations takes seconds in a test build.
    let patient = "  limits:\n    connect_timeout: 120s\n";
    let mut broker = two_doors_with(dir.path(), &file, patient);
    let fleet = broker.door_port("fleet");
    // The log states what the argon2 entry holds while it is checked.
    broker.wait_for_log(&format!(
        "one password check at a time, holding at most {} bytes of argon2 memory",
        47_104 * 1024
    ));
    // Each kind right and wrong, on both protocols; the 210,000-iteration
    // entry and the unknown user checked in its place once each way, as
    // each of those checks takes seconds here.
    let cases = [
        ("alice", "wonderland", "mqttv311", ADMITTED),
        ("alice", "wonderland!", "mqttv5", REFUSED_V5),
        ("bob", "builder", "mqttv5", ADMITTED),
        ("bob", "builder!", "mqttv311", REFUSED_V311),
        ("dora", "d0ra", "mqttv5", ADMITTED),
        ("dora", "d0ra!", "mqttv311", REFUSED_V311),
        ("erin", "s3cret", "mqttv311", ADMITTED),
        ("erin", "s3cret", "mqttv5", ADMITTED),
        ("erin", "s3cret!", "mqttv5", REFUSED_V5),
        ("erin", "s3creT", "mqttv311", REFUSED_V311),
        ("frank", "s3cret", "mqttv5", REFUSED_V5),
    ];
    for (user, password, version, expected) in cases {
        assert_eq!(
            publish_as(fleet, version, Some(user), Some(password)),
            expected,
            "{user} with {password:?} on {version}"
        );
    }
}

#[test]
fn the_refusal_codes_are_exact_on_both_protocols() {
    let dir = TempDir::new("auth-codes");
    let file = dir.path().join("clients.passwd");
    let added = saguin_passwd(&file, &["add", "dave"], "s3cret");
    assert!(added.status.success(), "{added:?}");
    let mut broker = two_doors(dir.path(), &file);
    let fleet = broker.door_port("fleet");
    for version in [ProtocolVersion::V311, ProtocolVersion::V5] {
        let mut connect = common::connect_packet(version, "raw");
        connect.username = Some("dave".into());
        connect.password = Some(b"wrong".to_vec());
        let mut client = RawClient::open(&format!("127.0.0.1:{fleet}"), version);
        client.send(&Packet::Connect(Box::new(connect.clone())));
        match client.recv() {
            Received::Packet(Packet::Connack(connack)) => {
                assert_eq!(connack.reason_code, ReasonCode::BAD_USER_NAME_OR_PASSWORD);
                // The same words for every refusal: nothing on the wire
                // tells a wrong password from an unknown user.
                if version == ProtocolVersion::V5 {
                    assert_eq!(
                        connack.properties.reason_string.as_deref(),
                        Some("bad user name or password")
                    );
                }
            }
            other => panic!("expected a CONNACK, got {other:?}"),
        }
        assert_eq!(client.recv(), Received::Closed);
        connect.password = Some(b"s3cret".to_vec());
        let mut client = RawClient::open(&format!("127.0.0.1:{fleet}"), version);
        client.send(&Packet::Connect(Box::new(connect)));
        match client.recv() {
            Received::Packet(Packet::Connack(connack)) => assert_eq!(connack.reason_code.0, 0),
            other => panic!("expected a CONNACK, got {other:?}"),
        }
    }
    // On 3.1.1 the byte on the wire is return code 4.
    let mut stream = TcpStream::connect(format!("127.0.0.1:{fleet}")).unwrap();
    let connect = [
        0x10, 0x0e, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x02, b'i',
        b'd',
    ];
    stream.write_all(&connect).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut connack = [0u8; 4];
    std::io::Read::read_exact(&mut stream, &mut connack).unwrap();
    assert_eq!(connack, [0x20, 0x02, 0x00, 0x04]);
}

struct Mosquitto(Child);

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_file_saguin_writes_is_read_by_mosquitto() {
    if !have_mosquitto("a_file_saguin_writes_is_read_by_mosquitto") {
        return;
    }
    let dir = TempDir::new("auth-to-mosquitto");
    let file = dir.path().join("clients.passwd");
    for (user, password) in [("erin", "first pass"), ("frank", "second")] {
        let added = saguin_passwd(&file, &["add", user], password);
        assert!(added.status.success(), "{added:?}");
    }
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("erin:$7$101$"), "{text}");
    let port = free_port();
    // Mosquitto started as root drops to its own user, which cannot read
    // an owner-only file: it is told to stay who started it.
    let me = Command::new("id").arg("-un").output().unwrap().stdout;
    let conf = dir.path().join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\npassword_file {}\nallow_anonymous false\nuser {}\n",
            file.display(),
            String::from_utf8_lossy(&me).trim()
        ),
    )
    .unwrap();
    let _mosquitto = Mosquitto(
        Command::new("mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "mosquitto did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        publish_as(port, "mqttv311", Some("erin"), Some("first pass")),
        0
    );
    assert_eq!(publish_as(port, "mqttv5", Some("frank"), Some("second")), 0);
    // Mosquitto answers a wrong password "not authorised".
    assert_eq!(
        publish_as(port, "mqttv311", Some("erin"), Some("second")),
        5
    );
}

#[test]
fn sigusr1_admits_a_user_added_and_a_broken_file_leaves_the_old_users() {
    if !have_mosquitto_clients("sigusr1_admits_a_user_added_and_a_broken_file_leaves_the_old_users")
    {
        return;
    }
    let dir = TempDir::new("auth-reload");
    let file = dir.path().join("clients.passwd");
    assert!(saguin_passwd(&file, &["add", "gina"], "one")
        .status
        .success());
    let mut broker = two_doors(dir.path(), &file);
    let fleet = broker.door_port("fleet");
    let mut connected = RawClient::open(&format!("127.0.0.1:{fleet}"), ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "stays");
    connect.username = Some("gina".into());
    connect.password = Some(b"one".to_vec());
    connected.send(&Packet::Connect(Box::new(connect)));
    assert!(
        matches!(connected.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0)
    );

    assert!(saguin_passwd(&file, &["add", "hank"], "two")
        .status
        .success());
    // Written, but not in force until the signal.
    assert_eq!(
        publish_as(fleet, "mqttv5", Some("hank"), Some("two")),
        REFUSED_V5
    );
    broker.signal("USR1");
    broker.wait_for_log("SIGUSR1: read again and in force");
    assert_eq!(
        publish_as(fleet, "mqttv5", Some("hank"), Some("two")),
        ADMITTED
    );

    // Deleting gina leaves her connection alone.
    assert!(saguin_passwd(&file, &["delete", "gina"], "")
        .status
        .success());
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("ivan:$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA\n");
    std::fs::write(&file, text).unwrap();
    broker.signal("USR1");
    let line = broker.wait_for_log("the password files read before stay in force");
    assert!(
        line.contains("ERROR")
            && line.contains(&format!("password file {}, line 2", file.display())),
        "{line}"
    );
    // The table before the broken file is still the one in force.
    assert_eq!(
        publish_as(fleet, "mqttv311", Some("gina"), Some("one")),
        ADMITTED
    );
    assert_eq!(
        publish_as(fleet, "mqttv311", Some("hank"), Some("two")),
        ADMITTED
    );
    connected.assert_alive();
}

#[test]
fn a_broken_password_file_refuses_startup_naming_file_and_line() {
    let dir = TempDir::new("auth-startup");
    let file = dir.path().join("clients.passwd");
    assert!(saguin_passwd(&file, &["add", "judy"], "pw")
        .status
        .success());
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&text.clone());
    std::fs::write(&file, text).unwrap();
    let config = dir.path().join("saguin.yaml");
    std::fs::write(
        &config,
        format!(
            "broker:\n  id: test\n  mqtt:\n    password_file: {}\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n",
            file.display()
        ),
    )
    .unwrap();
    for flag in ["--config", "--check-config"] {
        let output = Command::new(env!("CARGO_BIN_EXE_saguin"))
            .arg(flag)
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{flag}");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains(&format!(
                "password file {}, lines 1 and 2: user \"judy\" is named twice",
                file.display()
            )),
            "{flag}: {said}"
        );
    }
}

#[test]
fn saguin_passwd_lists_deletes_and_refuses_what_it_cannot_keep() {
    let dir = TempDir::new("auth-passwd");
    let file = dir.path().join("clients.passwd");
    assert!(saguin_passwd(&file, &["add", "kim"], "a").status.success());
    assert!(saguin_passwd(&file, &["add", "lee"], "b").status.success());
    // Set again: the line is replaced, not added.
    assert!(saguin_passwd(&file, &["add", "kim"], "c").status.success());
    let listed = saguin_passwd(&file, &["list"], "");
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "kim\nlee\n");
    assert!(saguin_passwd(&file, &["delete", "kim"], "")
        .status
        .success());
    let listed = saguin_passwd(&file, &["list"], "");
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "lee\n");
    let missing = saguin_passwd(&file, &["delete", "kim"], "");
    assert_eq!(missing.status.code(), Some(2));
    let empty = saguin_passwd(&file, &["add", "mo"], "");
    assert_eq!(empty.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&empty.stderr).contains("empty password"));
}

#[test]
fn saguin_passwd_writes_pbkdf2_unless_asked_for_argon2id() {
    let dir = TempDir::new("auth-passwd-kinds");
    let file = dir.path().join("clients.passwd");
    assert!(saguin_passwd(&file, &["add", "kim"], "k1m")
        .status
        .success());
    assert!(saguin_passwd(&file, &["add", "lee", "--argon2id"], "l33")
        .status
        .success());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("kim:$7$101$"), "{text}");
    assert!(
        text.contains("\nlee:$argon2id$v=19$m=47104,t=1,p=1$"),
        "{text}"
    );
    let read = saguin::auth::PasswordFile::load(&file).unwrap();
    assert!(read.get("lee").unwrap().verify(b"l33"));
    assert!(!read.get("lee").unwrap().verify(b"k1m"));
    assert!(read.get("kim").unwrap().verify(b"k1m"));
}

/// Enough PBKDF2 iterations that one check takes seconds in a test build.
const SLOW_ITERATIONS: u32 = 30_000;

#[test]
fn a_slow_password_check_holds_up_no_other_client() {
    let dir = TempDir::new("auth-slow");
    let file = dir.path().join("clients.passwd");
    // The digest is no password's: each check is a costly refusal.
    let zeros = format!("{}==", "A".repeat(86));
    std::fs::write(
        &file,
        format!("slow:$7${SLOW_ITERATIONS}$BwcHBwcHBwcHBwcH${zeros}\n"),
    )
    .unwrap();
    // The CONNECT waits on its check within connect_timeout.
    let patient = "  limits:\n    connect_timeout: 120s\n";
    let mut broker = two_doors_with(dir.path(), &file, patient);
    let fleet = broker.door_port("fleet");
    let local = broker.door_port("local");
    let mut bystander = RawClient::connect(
        &format!("127.0.0.1:{local}"),
        ProtocolVersion::V5,
        "bystander",
    );
    let mut slow = RawClient::open(&format!("127.0.0.1:{fleet}"), ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "slow");
    connect.username = Some("slow".into());
    connect.password = Some(b"guess".to_vec());
    slow.send(&Packet::Connect(Box::new(connect)));
    broker.wait_for_log("checking a password off the executor");
    // Served while the hash is still being computed.
    bystander.assert_alive();
    assert_eq!(slow.recv_within(std::time::Duration::ZERO), None);
    match slow.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code, ReasonCode::BAD_USER_NAME_OR_PASSWORD)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

#[test]
fn a_door_with_its_own_file_admits_its_users_only_beside_an_open_door() {
    if !have_mosquitto_clients("a_door_with_its_own_file_admits_its_users_only_beside_an_open_door")
    {
        return;
    }
    let dir = TempDir::new("auth-own-file");
    let file = dir.path().join("fleet.passwd");
    assert!(saguin_passwd(&file, &["add", "nina"], "pw")
        .status
        .success());
    // The broker admits anonymous clients; the fleet door names a file of
    // its own, and so admits its users and nobody else.
    let config = format!(
        "broker:\n  id: test\n  log_level: debug\n  mqtt:\n    allow_anonymous: true\n    listen:\n      tcp:\n        - name: fleet\n          address: 127.0.0.1:0\n          password_file: {}\n        - name: local\n          address: 127.0.0.1:0\n",
        file.display()
    );
    let mut broker = BrokerProcess::start_with_config(dir.path(), &config);
    let fleet = broker.door_port("fleet");
    let local = broker.door_port("local");
    for (version, refused) in [("mqttv311", REFUSED_V311), ("mqttv5", REFUSED_V5)] {
        assert_eq!(
            publish_as(fleet, version, Some("nina"), Some("pw")),
            ADMITTED
        );
        assert_eq!(publish_as(fleet, version, None, None), refused);
        assert_eq!(
            publish_as(fleet, version, Some("nina"), Some("no")),
            refused
        );
        // No file on this door: anybody, named or not, unchecked.
        assert_eq!(publish_as(local, version, None, None), ADMITTED);
        assert_eq!(
            publish_as(local, version, Some("nina"), Some("no")),
            ADMITTED
        );
    }
}

/// The CPU time the broker process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses, utime and stime are the 12th
    // and 13th fields.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The CPU `attempts` refused CONNECTs as `user` cost the broker.
fn cost_of_refusals(broker: &BrokerProcess, user: &str, attempts: u32) -> u64 {
    let before = cpu_ticks(broker.pid());
    for n in 0..attempts {
        let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
        let mut connect = common::connect_packet(ProtocolVersion::V5, &format!("c{n}"));
        connect.username = Some(user.into());
        connect.password = Some(b"wrong".to_vec());
        client.send(&Packet::Connect(Box::new(connect)));
        match client.recv() {
            Received::Packet(Packet::Connack(c)) => {
                assert_eq!(c.reason_code, ReasonCode::BAD_USER_NAME_OR_PASSWORD)
            }
            other => panic!("expected a CONNACK, got {other:?}"),
        }
    }
    cpu_ticks(broker.pid()) - before
}

/// A name the file does not hold costs a refusal what its costliest entry
/// costs, so that entries of different costs cannot tell a caller which
/// names exist. Measured as CPU the broker spent, which is work done rather
/// than time taken: forty cheap `$6$` entries beside one `$7$` entry of
/// many iterations.
#[test]
fn an_unknown_user_costs_what_the_costliest_entry_costs() {
    use saguin::auth::hash::PasswordHash;
    let dir = TempDir::new("auth-stand-in");
    let cheap = PasswordHash::Sha512 {
        salt: Box::new([1; 12]),
        digest: [0; 64],
    };
    // Only refused here, so the digest need match no password.
    let dear = PasswordHash::Pbkdf2Sha512 {
        iterations: 10_000,
        salt: Box::new([2; 12]),
        digest: [0; 64],
    };
    let mut text: String = (0..40).map(|n| format!("cheap-{n}:{cheap}\n")).collect();
    text.push_str(&format!("dear:{dear}\n"));
    let file = dir.path().join("clients.passwd");
    std::fs::write(&file, text).unwrap();
    let config = format!(
        "broker:\n  id: test\n  mqtt:\n    password_file: {}\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n",
        file.display()
    );
    let broker = BrokerProcess::start_with_config(dir.path(), &config);
    let known = cost_of_refusals(&broker, "dear", 3);
    let unknown = cost_of_refusals(&broker, "nobody", 3);
    assert!(
        known >= 10,
        "the dear entry took {known} ticks: too cheap to compare"
    );
    assert!(
        2 * unknown >= known,
        "an unknown name cost {unknown} ticks, a known one {known}"
    );
}
