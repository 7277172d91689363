//! The acl_file's refusals: each names its line and what to write.

use super::*;
use crate::config::parse as parse_config;

const CONFIG: &str = "\
broker:
  id: test
  storage:
    default: volatile
    default_retention_period: none
    default_retention_bytes: none
    providers:
      volatile:
        type: memory
        max_bytes: 64MiB
        snapshot_dir: /tmp
channels:
  events:
    type: append
    filter: events/#
  state:
    type: latest
    filter: state/#
  jobs:
    type: queue
    filter: jobs/#
";

fn channels() -> Vec<ChannelConfig> {
    parse_config(CONFIG, "test.yaml")
        .expect("the test configuration is valid")
        .channels
}

fn refused(text: &str) -> Vec<String> {
    match parse(text, "acl.yaml", &channels()) {
        Ok(acl) => panic!("accepted: {acl:?}"),
        Err(error) => error.findings,
    }
}

#[test]
fn a_good_file_is_read_whole() {
    let text = "\
roles:
  tour:
    - channel: events
      allow: [write, read, seek]
    - channel: state
      filter: state/{a,b}/%u
      allow: [write, read, delete]
    - channel: jobs
      allow: [write, consume]
    - channel: jobs__dlq
      allow: [read, seek]
    - topic: \"#\"
      allow: [write, read]
  on-call:
    - broker: sessions
      allow: [disconnect]
  constrained:
    - broker: features
      deny: [persistent, will, share, retained, qos2]
users:
  demo: [tour]
  \"device-*\":
    roles: [constrained]
    client_ids: \"%u\"
    limits:
      publish_rate: 20
      publish_bytes: 8KiB
";
    let acl = parse(text, "acl.yaml", &channels()).expect("valid");
    assert_eq!(acl.roles.len(), 3);
    assert_eq!(acl.roles[0].rules[1].filters, ["state/a/%u", "state/b/%u"]);
    let device = acl.entry_for("device-7").expect("matched");
    assert_eq!(device.client_ids.as_deref(), Some(&["%u".to_string()][..]));
    assert_eq!(
        device.limits,
        Some(Limits {
            publish_rate_per_s: Some(20),
            publish_bytes_per_s: Some(8192)
        })
    );
}

#[test]
fn every_refusal_names_its_line_and_the_fix() {
    // (file, text every finding must hold)
    let cases: &[(&str, &str)] = &[
        ("clients:\n  a: [r]\n", "line 1: clients: the block is users:"),
        (
            "roles:\n  r:\n    - channel: jobs\n      allow: [read]\n",
            "line 4: roles.r[0].allow: read is not a verb of a queue",
        ),
        (
            "roles:\n  r:\n    - channel: events\n      allow: [delete]\n",
            "\"delete\" is not a verb of an append channel rule; it takes write, read, seek",
        ),
        (
            "roles:\n  r:\n    - channel: nowhere\n      allow: [read]\n",
            "line 3: roles.r[0].channel: \"nowhere\" is not a configured channel; the channels are events, state, jobs, jobs__dlq",
        ),
        (
            "roles:\n  r:\n    - channel: \"ev-%u\"\n      allow: [read]\n",
            "never into a channel name",
        ),
        (
            "roles:\n  r:\n    - channel: events\n      filter: other/#\n      allow: [read]\n",
            "line 4: roles.r[0].filter: \"other/#\" matches none of channel events's topics",
        ),
        (
            "roles:\n  r:\n    - topic: alerts/#/page\n      allow: [read]\n",
            "is not a well-formed filter",
        ),
        (
            "roles:\n  r:\n    - topic: events/x\n      allow: [read]\n",
            "topic \"events/x\" is inside channel events, whose filter is \"events/#\"",
        ),
        (
            "roles:\n  r:\n    - channel: events\n      allow: [read]\n      deny: [will]\n",
            "line 5: roles.r[0].deny: deny: is written only on a broker: features rule",
        ),
        (
            "roles:\n  r:\n    - broker: features\n      deny: [retain]\n",
            "the feature is retained",
        ),
        (
            "roles:\n  r:\n    - broker: features\n      deny: [will, will]\n",
            "will is written twice",
        ),
        (
            "roles:\n  r:\n    - broker: features\n      allow: [will]\n",
            "takes deny: and nothing else",
        ),
        (
            "roles:\n  r:\n    - broker: nothing\n      allow: [x]\n",
            "is not a facility of the broker",
        ),
        (
            "roles:\n  r:\n    - topic: a/#\n      allow: [read]\nusers:\n  u:\n    client_ids: \"%u\"\n",
            "line 6: users.u: an entry names the roles it gives",
        ),
        (
            "roles:\n  r:\n    - topic: a/#\n      allow: [read]\nusers:\n  u:\n    roles: [r]\n    client_ids: []\n",
            "line 8: users.u.client_ids: it admits no client id",
        ),
        (
            "roles:\n  r:\n    - topic: a/#\n      allow: [read]\nusers:\n  u: [nobody]\n",
            "\"nobody\" is not a role under roles:",
        ),
        (
            "roles:\n  r:\n    - topic: a/#\n      allow: [read]\nusers:\n  \"a-*\": [r]\n  \"*-b\": [r]\n",
            "\"a-*\" and \"*-b\" spell out as many characters",
        ),
        (
            "roles:\n  r:\n    - topic: a/#\n      allow: [read]\nusers:\n  u:\n    roles: [r]\n    limits:\n      publish_rate: 0\n",
            "line 9: users.u.limits.publish_rate: 0 is not a rate",
        ),
        ("roles: [\n", "not valid YAML"),
    ];
    for (text, wanted) in cases {
        let findings = refused(text);
        assert!(
            findings.iter().any(|f| f.contains(wanted)),
            "{text}\nwanted {wanted:?} in {findings:#?}"
        );
    }
}

#[test]
fn patterns_of_different_exactness_may_overlap() {
    let text = "\
roles:
  r:
    - topic: a/#
      allow: [read]
users:
  \"device-*\": [r]
  \"device-7\": [r]
  \"*\": [r]
  \"north-*\": [r]
  \"south-*\": [r]
";
    let acl = parse(text, "acl.yaml", &channels()).expect("valid");
    assert_eq!(acl.entry_for("device-7").unwrap().pattern, "device-7");
    assert_eq!(acl.entry_for("device-8").unwrap().pattern, "device-*");
    assert_eq!(acl.entry_for("x").unwrap().pattern, "*");
}

#[test]
fn the_shipped_example_is_accepted() {
    let acl = parse(
        include_str!("../../examples/acl.yaml"),
        "examples/acl.yaml",
        &channels(),
    )
    .expect("examples/acl.yaml is valid");
    let device = acl.entry_for("device-7").expect("matched");
    assert!(device.admits_client_id("device-7", "device-7-a"));
    assert!(!device.admits_client_id("device-7", "device-8"));
}
