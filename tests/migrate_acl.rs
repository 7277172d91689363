//! mosquitto's acl_file and the roles `saguin migrate` writes for it
//! answer alike: Debian's mosquitto runs the original, this broker the
//! migrated configuration, and the same users are asked the same
//! publishes and subscriptions of both.
//!
//! Where the two cannot agree by design, the case says why, and what is
//! asserted is the direction this broker differs in (README, "From
//! mosquitto").

mod common;

use std::path::Path;
use std::process::Command;

use common::free_port;
use common::mosquitto::{have_mosquitto, Mosquitto};
use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{
    Packet, Properties, ProtocolVersion, Publish, QoS, Subscribe, SubscriptionOptions,
};

/// The users, each with password `<name>-pw`.
const USERS: [&str; 6] = ["alice", "bob", "carol", "dave", "eve", "admin"];

const ACL: &str = "\
# Clients without a user name.
topic read public/#

user alice
topic read sensors/+/temp
topic readwrite alice/#
topic write cmd/+/set
topic deny cmd/reactor/set
topic read logs/#
topic deny logs/#

user bob
topic readwrite shared/#
topic read $SYS/#
topic deny private/#

user carol
topic read sensors/#
topic deny devices/carol/locked/#

user admin
topic readwrite #

pattern readwrite devices/%u/#
pattern write clients/%c/status
pattern read sentinel/%u
pattern read alerts/#
pattern deny alerts/internal/#
pattern read archive/%u/#
pattern deny archive/#
";

#[derive(Clone, Copy, Debug)]
enum Act {
    /// Publish to the topic.
    Publish(&'static str),
    /// Subscribe to the filter; the administrator publishes the topic
    /// (a `$SYS` topic is mosquitto's own retained one).
    Subscribe(&'static str, &'static str),
}

#[derive(Clone, Copy, Debug)]
struct Case {
    user: Option<&'static str>,
    client_id: &'static str,
    act: Act,
    /// Where the two differ by design: why, and whether this broker is
    /// the one that refuses.
    differs: Option<(&'static str, bool)>,
}

const fn case(user: &'static str, act: Act) -> Case {
    Case {
        user: Some(user),
        client_id: "",
        act,
        differs: None,
    }
}

const fn as_id(user: &'static str, client_id: &'static str, act: Act) -> Case {
    Case {
        user: Some(user),
        client_id,
        act,
        differs: None,
    }
}

const fn differs(c: Case, why: &'static str, saguin_refuses: bool) -> Case {
    Case {
        differs: Some((why, saguin_refuses)),
        ..c
    }
}

const PARTIAL: &str =
    "a deny line cutting part of a grant away: roles only grant, so the grant is left out whole";
const WHOLE: &str = "a subscription is granted whole or refused here; mosquitto grants any and filters each delivery";
const SYS: &str = "no $SYS tree is served here";
const ANONYMOUS: &str = "no client without a user name is admitted beside an acl_file here";
const DANGEROUS_ID: &str = "mosquitto refuses every pattern to a client id holding + or #; here only rules naming %c are withheld";

use Act::{Publish as P, Subscribe as S};

const CASES: &[Case] = &[
    // alice: own lines, patterns, an exact deny and a partial one.
    case("alice", P("alice/notes")),
    case("alice", P("alice")),
    case("alice", P("sensors/a/temp")),
    differs(case("alice", P("cmd/pump/set")), PARTIAL, true),
    case("alice", P("cmd/reactor/set")),
    case("alice", P("devices/alice/led")),
    case("alice", P("devices/bob/led")),
    as_id("alice", "alice-1", P("clients/alice-1/status")),
    as_id("alice", "alice-1", P("clients/other/status")),
    case("alice", P("$SYS/broker/anything")),
    case("alice", P("public/news")),
    case("alice", S("sensors/+/temp", "sensors/k/temp")),
    case("alice", S("sensors/k/temp", "sensors/k/temp")),
    case("alice", S("sensors/k/humidity", "sensors/k/humidity")),
    differs(case("alice", S("sensors/#", "sensors/k/temp")), WHOLE, true),
    case("alice", S("logs/app", "logs/app")),
    case("alice", S("alice/#", "alice/x")),
    differs(
        case("alice", S("alerts/fire", "alerts/fire")),
        PARTIAL,
        true,
    ),
    case("alice", S("alerts/internal/x", "alerts/internal/x")),
    case("alice", S("archive/alice/x", "archive/alice/x")),
    case("alice", S("devices/alice/#", "devices/alice/t")),
    case("alice", S("$SYS/broker/version", "$SYS/broker/version")),
    case("alice", S("public/news", "public/news")),
    // bob: a deny meeting none of his grants, and $SYS.
    case("bob", P("shared/a/b")),
    case("bob", P("shared")),
    case("bob", P("private/x")),
    case("bob", P("devices/bob/x")),
    case("bob", P("alerts/fire")),
    differs(
        case("bob", S("$SYS/broker/version", "$SYS/broker/version")),
        SYS,
        true,
    ),
    case("bob", S("shared/#", "shared/z")),
    case("bob", S("private/x", "private/x")),
    case("bob", S("#", "misc/x")),
    case("bob", S("devices/bob/+", "devices/bob/t")),
    case("bob", S("sentinel/alice", "sentinel/alice")),
    // carol: her own deny cuts into a pattern.
    case("carol", S("sensors/secret", "sensors/secret")),
    case("carol", S("sensors/+/temp", "sensors/z/temp")),
    differs(case("carol", P("devices/carol/x")), PARTIAL, true),
    case("carol", P("devices/carol/locked/x")),
    as_id("carol", "carol-c", P("clients/carol-c/status")),
    case("carol", P("sensors/a/temp")),
    differs(
        case("carol", S("devices/carol/x", "devices/carol/x")),
        PARTIAL,
        true,
    ),
    case(
        "carol",
        S("devices/carol/locked/x", "devices/carol/locked/x"),
    ),
    // dave: in the password file, with no section: the patterns alone.
    case("dave", P("devices/dave/x")),
    case("dave", P("devices/alice/x")),
    case("dave", P("archive/dave/x")),
    as_id("dave", "dave-9", P("clients/dave-9/status")),
    case("dave", P("anything/else")),
    case("dave", S("devices/dave/#", "devices/dave/a")),
    case("dave", S("devices/+/a", "devices/eve/a")),
    case("dave", S("archive/dave/x", "archive/dave/x")),
    case("dave", S("sentinel/alice", "sentinel/alice")),
    case("dave", S("public/#", "public/x")),
    case("dave", S("alerts/internal/y", "alerts/internal/y")),
    // admin: everything but $SYS, which no `#` reaches.
    case("admin", P("any/topic")),
    case("admin", P("$SYS/broker/anything")),
    case("admin", S("#", "any/x")),
    case("admin", S("$SYS/broker/version", "$SYS/broker/version")),
    case("admin", S("+/x", "a/x")),
    // eve, with a client id holding +.
    differs(
        as_id("eve", "eve+1", P("devices/eve/x")),
        DANGEROUS_ID,
        false,
    ),
    as_id("eve", "eve+1", P("clients/eve+1/status")),
    // No user name.
    differs(
        Case {
            user: None,
            client_id: "",
            act: S("public/news", "public/news"),
            differs: None,
        },
        ANONYMOUS,
        true,
    ),
    Case {
        user: None,
        client_id: "",
        act: P("public/news"),
        differs: None,
    },
];

fn password(user: &str) -> String {
    format!("{user}-pw")
}

/// A connection as `user` (none: anonymous) with `client_id`, or `None`
/// where the CONNECT is refused.
fn connect(address: &str, user: Option<&str>, client_id: &str) -> Option<RawClient> {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, client_id);
    if let Some(user) = user {
        connect.username = Some(user.into());
        connect.password = Some(password(user).into_bytes());
    }
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0 => Some(client),
        _ => None,
    }
}

fn publish(client: &mut RawClient, topic: &str) -> bool {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(7),
        payload: b"x".to_vec(),
        ..Publish::default()
    }));
    loop {
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) => return ack.reason_code.0 < 0x80,
            Received::Packet(Packet::Publish(_)) => continue,
            _ => return false,
        }
    }
}

/// Subscribes, and returns the topics of what arrived before the SUBACK
/// (a retained message, say).
fn subscribe(client: &mut RawClient, filter: &str) -> Vec<String> {
    client.send(&Packet::Subscribe(Subscribe {
        packet_id: 3,
        properties: Properties::default(),
        filters: vec![(
            filter.into(),
            SubscriptionOptions {
                qos: QoS::AtLeastOnce,
                ..SubscriptionOptions::default()
            },
        )],
    }));
    let mut early = Vec::new();
    loop {
        match client.recv() {
            Received::Packet(Packet::Suback(_)) => return early,
            Received::Packet(Packet::Publish(p)) => {
                acknowledge(client, &p);
                early.push(p.topic.to_string());
            }
            other => panic!("expected a SUBACK for {filter}, got {other:?}"),
        }
    }
}

fn acknowledge(client: &mut RawClient, publish: &Publish) {
    if let Some(packet_id) = publish.packet_id {
        client.send(&Packet::Puback(saguin::codec::PubAck {
            packet_id,
            ..saguin::codec::PubAck::default()
        }));
    }
}

/// Whether the case is allowed at the broker at `address`.
fn allowed(address: &str, case: &Case) -> bool {
    let Some(mut client) = connect(address, case.user, case.client_id) else {
        return false;
    };
    match case.act {
        Act::Publish(topic) => publish(&mut client, topic),
        Act::Subscribe(filter, topic) => {
            // A topic the reader may read, sent after the one asked about:
            // once it arrives, the other would have.
            let sentinel = match case.user {
                Some(user) => format!("sentinel/{user}"),
                None => "public/sentinel".to_string(),
            };
            let mut early = subscribe(&mut client, filter);
            early.extend(subscribe(&mut client, &sentinel));
            let mut admin = connect(address, Some("admin"), "admin").expect("admin connects");
            if !topic.starts_with('$') {
                assert!(publish(&mut admin, topic), "admin publishes {topic}");
            }
            assert!(publish(&mut admin, &sentinel), "admin publishes {sentinel}");
            let mut got = early.iter().any(|t| t == topic);
            loop {
                match client.recv() {
                    Received::Packet(Packet::Publish(p)) if *p.topic == *sentinel => return got,
                    Received::Packet(Packet::Publish(p)) => {
                        got |= *p.topic == *topic;
                        acknowledge(&mut client, &p);
                    }
                    Received::Packet(_) => {}
                    Received::Closed => panic!("{case:?}: the reader was closed"),
                }
            }
        }
    }
}

fn passwords(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("passwd");
    for (at, user) in USERS.iter().enumerate() {
        let mut command = Command::new("mosquitto_passwd");
        if at == 0 {
            command.arg("-c");
        }
        let status = command
            .arg("-b")
            .arg(&file)
            .arg(user)
            .arg(password(user))
            .status()
            .expect("run mosquitto_passwd");
        assert!(status.success());
    }
    file
}

#[test]
fn mosquitto_and_the_migrated_roles_answer_the_same_users_alike() {
    let test = "mosquitto_and_the_migrated_roles_answer_the_same_users_alike";
    if !have_mosquitto(test) || !common::have_tools(test, &["mosquitto_passwd"], "mosquitto") {
        return;
    }
    let dir = TempDir::new("migrate-acl");
    let passwd = passwords(dir.path());
    let acl = dir.path().join("acl");
    std::fs::write(&acl, ACL).unwrap();
    let port = free_port();
    let conf = format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\npassword_file {}\nacl_file {}\n",
        passwd.display(),
        acl.display()
    );
    let mosquitto = Mosquitto::start(dir.path(), &conf, port);

    let out = dir.path().join("migrated");
    let migrated = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("migrate")
        .arg(dir.path().join("mosquitto.conf"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let report = String::from_utf8_lossy(&migrated.stdout);
    // A line for each option and each rule line of the acl_file.
    let lines_of = |file: &Path| {
        let place = format!("{}:", file.display());
        report.lines().filter(|l| l.starts_with(&place)).count()
    };
    assert_eq!(lines_of(&dir.path().join("mosquitto.conf")), 4, "{report}");
    let rules = ACL.lines().filter(|l| !l.is_empty() && !l.starts_with('#'));
    assert_eq!(lines_of(&acl), rules.count(), "{report}");
    let config = std::fs::read_to_string(out.join("saguin.yaml"))
        .unwrap()
        .replace(&format!("127.0.0.1:{port}"), "127.0.0.1:0");
    let saguin = BrokerProcess::start_with_config(&out, &config);

    let mut same = 0;
    let mut allowed_somewhere = 0;
    for case in CASES {
        let by_mosquitto = allowed(&mosquitto.address(), case);
        let by_saguin = allowed(&saguin.address(), case);
        allowed_somewhere += usize::from(by_mosquitto || by_saguin);
        match case.differs {
            None => {
                assert_eq!(
                    by_saguin, by_mosquitto,
                    "{case:?}: mosquitto says {by_mosquitto}\n{report}"
                );
                same += 1;
            }
            Some((why, saguin_refuses)) => assert_eq!(
                (by_mosquitto, by_saguin),
                (saguin_refuses, !saguin_refuses),
                "{case:?} was to differ ({why})"
            ),
        }
    }
    assert!(same >= 50, "only {same} cases answered alike");
    // Neither broker refuses everything: the agreement is about something.
    assert!(allowed_somewhere >= 20, "{allowed_somewhere}");
    mosquitto.stop();
}
