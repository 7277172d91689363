//! The decision engine, table by table.

use super::*;

/// Three channels, as the core files them.
struct Channels;

const NAMES: [&str; 3] = ["events", "state", "jobs"];

impl ChannelIndex for Channels {
    fn channel_count(&self) -> usize {
        NAMES.len()
    }
    fn index_of(&self, name: &str) -> Option<usize> {
        NAMES.iter().position(|n| *n == name)
    }
    fn filters_of(&self, channel: usize) -> &[String] {
        thread_local! {
            static FILTERS: Vec<Vec<String>> = vec![
                vec!["events/#".to_string()],
                vec!["state/#".to_string()],
                vec!["jobs/#".to_string()],
            ];
        }
        // Leaked once per call: a test-only convenience.
        FILTERS.with(|f| Box::leak(f[channel].clone().into_boxed_slice()))
    }
}

const EVENTS: Option<usize> = Some(0);
const STATE: Option<usize> = Some(1);
const JOBS: Option<usize> = Some(2);
const BROADCAST: Option<usize> = None;

fn rule(subject: Subject, filters: &[&str], verbs: Verbs) -> Rule {
    Rule {
        subject,
        written_filter: filters.first().map(|f| f.to_string()),
        filters: filters.iter().map(|f| f.to_string()).collect(),
        verbs,
        denies: Features::NONE,
    }
}

fn channel(name: &str) -> Subject {
    Subject::Channel(name.to_string())
}

fn entry(pattern: &str, roles: &[usize]) -> Entry {
    Entry {
        pattern: pattern.to_string(),
        roles: roles.to_vec(),
        client_ids: None,
        limits: None,
    }
}

/// reader (0): read+seek on events, read on alerts/#.
/// publisher (1): write on events under events/telemetry/%u/#.
/// device (2): write+read on iot/%u/health/%c.
/// worker (3): consume on jobs. constrained (4): every feature denied.
/// on-call (5): disconnect.
fn fleet() -> Acl {
    let constrained = Rule {
        denies: Features::ALL
            .iter()
            .fold(Features::NONE, |a, (f, _)| a.with(*f)),
        ..rule(Subject::Features, &[], Verbs::NONE)
    };
    let roles = vec![
        Role {
            name: "reader".into(),
            rules: vec![
                rule(channel("events"), &[], Verbs::READ.with(Verbs::SEEK)),
                rule(Subject::Topic, &["alerts/#"], Verbs::READ),
            ],
        },
        Role {
            name: "publisher".into(),
            rules: vec![rule(
                channel("events"),
                &["events/telemetry/%u/#"],
                Verbs::WRITE,
            )],
        },
        Role {
            name: "device".into(),
            rules: vec![rule(
                Subject::Topic,
                &["iot/%u/health/%c"],
                Verbs::WRITE.with(Verbs::READ),
            )],
        },
        Role {
            name: "worker".into(),
            rules: vec![rule(channel("jobs"), &[], Verbs::CONSUME)],
        },
        Role {
            name: "constrained".into(),
            rules: vec![constrained],
        },
        Role {
            name: "on-call".into(),
            rules: vec![rule(Subject::Sessions, &[], Verbs::DISCONNECT)],
        },
    ];
    Acl {
        source: "test".into(),
        roles,
        entries: vec![
            entry("dashboard", &[0]),
            entry("vessel-*", &[1, 3]),
            entry("cohort-*", &[2, 4]),
            entry("vessel-9", &[0]),
            entry("oncall", &[5]),
        ],
    }
}

#[test]
fn each_verb_is_allowed_only_where_a_rule_grants_it() {
    let acl = fleet();
    // (user, client id, verb, channel, topic, allowed)
    type Case<'a> = (&'a str, &'a str, Verbs, Option<usize>, &'a str, bool);
    let cases: &[Case] = &[
        ("dashboard", "d1", Verbs::READ, EVENTS, "events/x", true),
        ("dashboard", "d1", Verbs::SEEK, EVENTS, "events/x", true),
        ("dashboard", "d1", Verbs::WRITE, EVENTS, "events/x", false),
        ("dashboard", "d1", Verbs::READ, STATE, "state/x", false),
        ("dashboard", "d1", Verbs::CONSUME, JOBS, "jobs/x", false),
        (
            "dashboard",
            "d1",
            Verbs::READ,
            BROADCAST,
            "alerts/fire",
            true,
        ),
        (
            "dashboard",
            "d1",
            Verbs::WRITE,
            BROADCAST,
            "alerts/fire",
            false,
        ),
        ("dashboard", "d1", Verbs::READ, BROADCAST, "other", false),
        // %u narrows a channel rule to the user's own subtree.
        (
            "vessel-1",
            "v",
            Verbs::WRITE,
            EVENTS,
            "events/telemetry/vessel-1/t",
            true,
        ),
        (
            "vessel-1",
            "v",
            Verbs::WRITE,
            EVENTS,
            "events/telemetry/vessel-2/t",
            false,
        ),
        (
            "vessel-1",
            "v",
            Verbs::READ,
            EVENTS,
            "events/telemetry/vessel-1/t",
            false,
        ),
        ("vessel-1", "v", Verbs::CONSUME, JOBS, "jobs/a", true),
        ("vessel-1", "v", Verbs::WRITE, JOBS, "jobs/a", false),
        // The most exact entry supplies everything: vessel-9 is a reader.
        (
            "vessel-9",
            "v",
            Verbs::WRITE,
            EVENTS,
            "events/telemetry/vessel-9/t",
            false,
        ),
        ("vessel-9", "v", Verbs::READ, EVENTS, "events/x", true),
        // %u and %c together: the cohort, then the device inside it.
        (
            "cohort-n",
            "n-1",
            Verbs::WRITE,
            BROADCAST,
            "iot/cohort-n/health/n-1",
            true,
        ),
        (
            "cohort-n",
            "n-1",
            Verbs::WRITE,
            BROADCAST,
            "iot/cohort-n/health/n-2",
            false,
        ),
        (
            "cohort-n",
            "n-1",
            Verbs::WRITE,
            BROADCAST,
            "iot/cohort-s/health/n-1",
            false,
        ),
        // Nobody matched: nothing.
        (
            "stranger",
            "s",
            Verbs::READ,
            BROADCAST,
            "alerts/fire",
            false,
        ),
        ("", "s", Verbs::READ, BROADCAST, "alerts/fire", false),
    ];
    for &(user, client_id, verb, channel, topic, want) in cases {
        let grants = Grants::compile(&acl, user, client_id, &Channels);
        assert_eq!(
            grants.allows(verb, channel, topic),
            want,
            "{user}/{client_id} {:?} on {topic}",
            verb.names()
        );
    }
}

#[test]
fn a_name_holding_topic_syntax_is_withheld_from_its_rule() {
    let acl = fleet();
    for client_id in ["#", "+", "a/b"] {
        let grants = Grants::compile(&acl, "cohort-n", client_id, &Channels);
        assert!(!grants.allows(Verbs::WRITE, BROADCAST, "iot/cohort-n/health/x"));
        assert_eq!(grants.withheld().len(), 1, "{client_id}");
        // Its other rules still apply.
        assert!(grants.denies(Features::QOS2));
    }
    let grants = Grants::compile(&acl, "vessel-#", "v", &Channels);
    assert!(!grants.allows(Verbs::WRITE, EVENTS, "events/telemetry/x/t"));
    assert!(grants.allows(Verbs::CONSUME, JOBS, "jobs/a"));
}

#[test]
fn a_subscription_is_granted_whole_or_refused() {
    let acl = fleet();
    let dashboard = Grants::compile(&acl, "dashboard", "d", &Channels);
    let vessel = Grants::compile(&acl, "vessel-1", "v", &Channels);
    // (grants, filter, channels reached, reaches broadcast, allowed)
    let cases: &[(&Grants, &str, &[usize], bool, bool)] = &[
        (&dashboard, "events/#", &[0], false, true),
        (&dashboard, "alerts/+", &[], true, true),
        // `#` reaches state, which the dashboard may not read.
        (&dashboard, "#", &[0, 1, 2], true, false),
        // Broadcast beyond alerts/.
        (&dashboard, "+/fire", &[], true, false),
        (&vessel, "events/#", &[0], false, false),
        (&dashboard, "state/x", &[1], false, false),
    ];
    for &(grants, filter, channels, broadcast, want) in cases {
        assert_eq!(
            grants.allows_filter(Verbs::READ, filter, channels, broadcast, &Channels),
            want,
            "{filter}"
        );
    }
    // A filter narrowed by the rule: inside it is granted, across it is not.
    let narrowed = Acl {
        roles: vec![Role {
            name: "mine".into(),
            rules: vec![rule(channel("events"), &["events/%u/#"], Verbs::READ)],
        }],
        entries: vec![entry("*", &[0])],
        ..Acl::default()
    };
    let grants = Grants::compile(&narrowed, "u1", "c", &Channels);
    assert!(grants.allows_filter(Verbs::READ, "events/u1/#", &[0], false, &Channels));
    assert!(grants.allows_filter(Verbs::READ, "events/u1/+", &[0], false, &Channels));
    assert!(!grants.allows_filter(Verbs::READ, "events/+/x", &[0], false, &Channels));
    assert!(!grants.allows_filter(Verbs::READ, "events/#", &[0], false, &Channels));
}

#[test]
fn a_feature_is_denied_by_any_role_that_denies_it() {
    let acl = fleet();
    let cohort = Grants::compile(&acl, "cohort-n", "n-1", &Channels);
    for (feature, name) in Features::ALL {
        assert!(cohort.denies(feature), "{name}");
    }
    let vessel = Grants::compile(&acl, "vessel-1", "v", &Channels);
    for (feature, name) in Features::ALL {
        assert!(!vessel.denies(feature), "{name}");
    }
}

#[test]
fn grants_only_add() {
    // Two roles on one channel: the union, never the intersection.
    let acl = Acl {
        roles: vec![
            Role {
                name: "w".into(),
                rules: vec![rule(channel("events"), &[], Verbs::WRITE)],
            },
            Role {
                name: "r".into(),
                rules: vec![rule(channel("events"), &["events/a/#"], Verbs::READ)],
            },
        ],
        entries: vec![entry("u", &[0, 1])],
        ..Acl::default()
    };
    let grants = Grants::compile(&acl, "u", "c", &Channels);
    assert!(grants.allows(Verbs::WRITE, EVENTS, "events/b"));
    assert!(grants.allows(Verbs::READ, EVENTS, "events/a/1"));
    assert!(!grants.allows(Verbs::READ, EVENTS, "events/b"));
}

#[test]
fn disconnect_rides_on_no_filter() {
    let acl = fleet();
    assert!(Grants::compile(&acl, "oncall", "o", &Channels).may_disconnect());
    assert!(!Grants::compile(&acl, "dashboard", "d", &Channels).may_disconnect());
}

#[test]
fn client_ids_tie_a_name_to_devices() {
    let mut acl = fleet();
    acl.entries[2].client_ids = Some(vec!["north-*".into(), "%u".into()]);
    assert!(acl.admits_client_id("cohort-n", "north-3"));
    assert!(acl.admits_client_id("cohort-n", "cohort-n"));
    assert!(!acl.admits_client_id("cohort-n", "south-3"));
    // A name holding `*` is never put into a pattern.
    assert!(!acl.admits_client_id("cohort-*", "cohort-x"));
    // No entry, no restriction.
    assert!(acl.admits_client_id("stranger", "anything"));
}

#[test]
fn the_table_names_each_rule_and_the_bounds() {
    let mut acl = fleet();
    acl.entries[1].limits = Some(Limits {
        publish_rate_per_s: Some(20),
        publish_bytes_per_s: Some(8192),
    });
    let rows = explain::table_rows(&acl, "vessel-1", None, Limits::default());
    assert_eq!(
        rows,
        "vessel-1\tpublisher\tchannel\tevents (events/telemetry/vessel-1/#)\twrite\t20\t8192\n\
         vessel-1\tworker\tchannel\tjobs\tconsume\t20\t8192\n"
    );
    let rows = explain::table_rows(&acl, "nobody", None, Limits::default());
    assert_eq!(rows, "nobody\t-\t-\t-\t-\tno bound\tno bound\n");
    let paragraph = explain::paragraph(&acl, "vessel-9", None, Limits::default());
    assert!(
        paragraph.contains("entry in force: \"vessel-9\""),
        "{paragraph}"
    );
    assert!(paragraph.contains("shadows \"vessel-*\""), "{paragraph}");
    assert!(paragraph.contains("broker-wide bounds"), "{paragraph}");
    let paragraph = explain::paragraph(&acl, "cohort-n", None, Limits::default());
    assert!(paragraph.contains("no client id was given"), "{paragraph}");
}
