//! The operator's tools on what a real broker wrote: `inspect` on a redb
//! file and a snapshot directory after a stop and after a kill, the
//! conversions between them with a consumer resuming after each step, and
//! every kind of bad input answered in one line with a failing exit.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{durable_connect, publish_all, BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{
    Packet, ProtocolVersion, PubAck, Publish, QoS, Subscribe, SubscriptionOptions,
};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const MEMORY: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: {dir}/snapshots\n";
/// One channel of every type; the queue derives `jobs__dlq`.
const CHANNELS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";

/// Runs the binary with `args`; its exit code, stdout and stderr.
fn saguin(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .args(args)
        .output()
        .expect("run saguin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

fn payloads(prefix: &str, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .collect()
}

/// Reads `count` channel deliveries, acknowledging each; their offsets.
fn consume(client: &mut RawClient, count: usize) -> Vec<u64> {
    let mut offsets = Vec::new();
    while offsets.len() < count {
        match client.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                let offset = label(&publish, "saguin-offset").parse().expect("numeric");
                if let Some(packet_id) = publish.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                offsets.push(offset);
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed after {} of {count} deliveries", offsets.len()),
        }
    }
    offsets
}

fn label(publish: &Publish, name: &str) -> String {
    publish
        .properties
        .user_properties
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} on {publish:?}"))
}

/// A queue worker that takes one job, acknowledges its delivery and keeps
/// it unanswered; the job's
/// offset and the attempt it was offered as.
fn take_one_job(address: &str, worker_id: &str) -> (RawClient, u64, u32) {
    let mut worker = RawClient::connect(address, ProtocolVersion::V5, worker_id);
    worker.send(&Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Default::default(),
        filters: vec![(
            "$saguin/queue/jobs".into(),
            SubscriptionOptions {
                qos: QoS::AtLeastOnce,
                ..SubscriptionOptions::default()
            },
        )],
    }));
    loop {
        match worker.recv() {
            Received::Packet(Packet::Publish(job)) => {
                let offset = label(&job, "saguin-offset").parse().expect("numeric");
                let attempt = label(&job, "saguin-attempt").parse().expect("numeric");
                // Acknowledged delivery: the worker holds the lease.
                worker.send(&Packet::Puback(PubAck {
                    packet_id: job.packet_id.expect("a QoS 1 job"),
                    ..PubAck::default()
                }));
                worker.assert_alive();
                return (worker, offset, attempt);
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("the worker was closed"),
        }
    }
}

/// What the broker was given, to compare with what a tool prints.
struct Published {
    events: usize,
    consumed: usize,
    job_offset: u64,
    job_attempts_spent: u32,
    job_attempts_at_stop: u32,
    from_ms: u64,
    to_ms: u64,
}

/// Starts a broker on `storage`, publishes to every channel type, has a
/// durable consumer read part of `events` and a worker hold a job.
/// The second worker is returned, to stay connected until the broker goes.
fn publish_to_every_channel(dir: &Path, storage: &str) -> (BrokerProcess, Published, RawClient) {
    let from_ms = now_ms();
    let broker = BrokerProcess::start_in(dir, storage, CHANNELS);
    let address = broker.address();
    let (mut reader, _) = durable_connect(&address, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    assert_eq!(
        publish_all(&mut publisher, "events/a", &payloads("e", 5)).len(),
        5
    );
    assert_eq!(
        publish_all(&mut publisher, "state/a", &payloads("s", 2)).len(),
        2
    );
    assert_eq!(
        publish_all(&mut publisher, "state/b", &payloads("t", 1)).len(),
        1
    );
    assert_eq!(
        publish_all(&mut publisher, "jobs/x", &payloads("j", 1)).len(),
        1
    );
    assert_eq!(consume(&mut reader, 3), vec![1, 2, 3]);
    reader.send(&Packet::Disconnect(Default::default()));
    // A worker that goes away mid-job spends an attempt; the job is offered
    // again only once that count is stored. The second worker's attempt is
    // stored once its delivery is acknowledged, and a stop ends its lease.
    let (first, job_offset, attempt) = take_one_job(&address, "worker-1");
    assert_eq!(attempt, 1);
    drop(first);
    let (second, again, attempt) = take_one_job(&address, "worker-2");
    assert_eq!((again, attempt), (job_offset, 2));
    let published = Published {
        events: 5,
        consumed: 3,
        job_offset,
        job_attempts_spent: 1,
        job_attempts_at_stop: 2,
        from_ms,
        to_ms: now_ms(),
    };
    (broker, published, second)
}

/// The line of `text` that starts with `start`, inside `channel`'s block.
fn channel_block<'t>(text: &'t str, channel: &str) -> &'t str {
    let head = format!("\nchannel {channel}\n");
    let at = text
        .find(&head)
        .unwrap_or_else(|| panic!("no channel {channel} in:\n{text}"));
    let rest = &text[at + 1..];
    let end = rest[1..].find("\nchannel ").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// Checks inspect's text and JSON against what was published; `settled`
/// when the broker stopped gracefully, so the consumer's position and the
/// sessions were written.
fn assert_inspected(path: &Path, published: &Published, settled: bool) {
    let (code, text, err) = saguin(&["inspect", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let events = channel_block(&text, "events");
    assert!(
        events.contains(&format!("records    {} (", published.events)),
        "{events}"
    );
    assert!(events.contains("floor 1, next 6"), "{events}");
    let state = channel_block(&text, "state");
    // Two topics: the second value of state/a replaced the first.
    assert!(state.contains("records    2 ("), "{state}");
    assert!(state.contains("next 4"), "{state}");
    // A kill may land before or after the second worker's acknowledged
    // delivery has its attempt stored; a stop always counts it.
    let possible = match settled {
        true => published.job_attempts_at_stop..=published.job_attempts_at_stop,
        false => published.job_attempts_spent..=published.job_attempts_at_stop,
    };
    let jobs = channel_block(&text, "jobs");
    assert!(jobs.contains("records    1 ("), "{jobs}");
    let attempts = possible
        .clone()
        .find(|n| jobs.contains(&format!("job {}: {n} attempts", published.job_offset)))
        .unwrap_or_else(|| panic!("attempts in {possible:?}: {jobs}"));
    let (code, json, err) = saguin(&["inspect", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let times: Vec<u64> = ["oldest_received_unix_ms", "newest_received_unix_ms"]
        .iter()
        .map(|key| {
            let at = json.find("\"name\":\"events\"").expect("events");
            let from = at + json[at..].find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
            let end = from + json[from..].find(',').expect("a comma");
            json[from..end].parse().expect("a number")
        })
        .collect();
    assert!(
        published.from_ms <= times[0] && times[0] <= times[1] && times[1] <= published.to_ms,
        "{times:?} within {}..{}",
        published.from_ms,
        published.to_ms
    );
    if settled {
        let position = format!("    reader at {}\n", published.consumed + 1);
        assert!(events.contains(&position), "{events}");
        let sessions = channel_block(&text, "$sessions");
        assert!(sessions.contains("reader: disconnected"), "{sessions}");
        assert!(sessions.contains("[events/#]"), "{sessions}");
        assert!(
            json.contains(&format!(
                "\"jobs\":[{{\"offset\":{},\"attempts\":{attempts}}}]",
                published.job_offset
            )),
            "{json}"
        );
    }
}

/// The bytes and modification time of every file under `path`.
fn fingerprint(path: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut files = Vec::new();
    let mut paths = vec![path.to_path_buf()];
    while let Some(p) = paths.pop() {
        let meta = std::fs::metadata(&p).expect("metadata");
        if meta.is_dir() {
            for entry in std::fs::read_dir(&p).expect("list") {
                paths.push(entry.expect("entry").path());
            }
        } else {
            files.push((
                p.display().to_string(),
                std::fs::read(&p).expect("read"),
                meta.modified().expect("mtime"),
            ));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

#[test]
fn inspect_reads_a_stopped_redb_file_without_changing_it() {
    let dir = TempDir::new("inspect-redb");
    let (mut broker, published, _worker) = publish_to_every_channel(dir.path(), REDB);
    assert!(broker.terminate().success());
    let file = dir.path().join("saguin.redb");
    let before = fingerprint(&file);
    assert_inspected(&file, &published, true);
    assert!(before == fingerprint(&file), "inspect changed the file");
}

#[test]
fn inspect_reads_a_killed_brokers_redb_file_from_a_recovered_copy() {
    let dir = TempDir::new("inspect-killed");
    let (mut broker, published, _worker) = publish_to_every_channel(dir.path(), REDB);
    broker.kill();
    let file = dir.path().join("saguin.redb");
    let before = fingerprint(&file);
    assert_inspected(&file, &published, false);
    assert!(before == fingerprint(&file), "inspect changed the file");
}

#[test]
fn inspect_reads_a_snapshot_directory() {
    let dir = TempDir::new("inspect-snapshots");
    std::fs::create_dir(dir.path().join("snapshots")).unwrap();
    let (mut broker, published, _worker) = publish_to_every_channel(dir.path(), MEMORY);
    assert!(broker.terminate().success());
    let snapshots = dir.path().join("snapshots");
    let before = fingerprint(&snapshots);
    assert_inspected(&snapshots, &published, true);
    assert!(
        before == fingerprint(&snapshots),
        "inspect changed the directory"
    );
}

#[test]
fn inspect_refuses_a_provider_the_running_broker_holds() {
    let dir = TempDir::new("inspect-locked");
    let broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let file = dir.path().join("saguin.redb");
    let (code, out, err) = saguin(&["inspect", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(file.to_str().unwrap()), "{err}");
    assert!(err.contains("in use by a running broker"), "{err}");
    assert!(err.contains("stop the broker first"), "{err}");
    drop(broker);
}

/// The `channels` part of inspect's JSON: everything but the path and
/// how the file describes itself.
fn inspected_channels(path: &Path) -> String {
    let (code, json, err) = saguin(&["inspect", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    json[json.find("\"channels\":").expect("channels")..].to_string()
}

fn convert(flag: &str, from: &Path, to: &Path) {
    let (code, out, err) = saguin(&[flag, from.to_str().unwrap(), to.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("read back and equal to the source"), "{out}");
    assert_eq!(inspected_channels(from), inspected_channels(to));
}

#[test]
fn snapshots_to_redb_and_back_keep_every_consumer_where_it_was() {
    let dir = TempDir::new("round-trip");
    let (memory_a, redb_b, memory_c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    for d in [&memory_a, &redb_b, &memory_c] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::create_dir(memory_a.join("snapshots")).unwrap();
    // A memory broker: the reader takes 3 of 6 records.
    let broker = BrokerProcess::start_in(&memory_a, MEMORY, CHANNELS);
    let address = broker.address();
    let (mut reader, _) = durable_connect(&address, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    publish_all(&mut publisher, "events/a", &payloads("first", 6));
    publish_all(&mut publisher, "jobs/x", &payloads("job", 1));
    assert_eq!(consume(&mut reader, 3), vec![1, 2, 3]);
    reader.send(&Packet::Disconnect(Default::default()));
    let (_worker, job, _) = take_one_job(&address, "worker-1");
    stop(broker);
    // Into redb: the reader resumes at 4, and takes the rest.
    convert(
        "--snapshots-to-redb",
        &memory_a.join("snapshots"),
        &redb_b.join("saguin.redb"),
    );
    let broker = BrokerProcess::start_in(&redb_b, REDB, CHANNELS);
    let address = broker.address();
    let (mut reader, present) = durable_connect(&address, "reader");
    assert!(present, "the session came across");
    assert_eq!(consume(&mut reader, 3), vec![4, 5, 6]);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    publish_all(&mut publisher, "events/a", &payloads("second", 2));
    assert_eq!(consume(&mut reader, 1), vec![7]);
    reader.send(&Packet::Disconnect(Default::default()));
    // The held job's attempt counted at the stop carried across: offered
    // again as its second attempt.
    let (_worker, again, attempt) = take_one_job(&address, "worker-2");
    assert_eq!((again, attempt), (job, 2));
    stop(broker);
    // And back into snapshots: the reader resumes at 8.
    convert(
        "--redb-to-snapshots",
        &redb_b.join("saguin.redb"),
        &memory_c.join("snapshots"),
    );
    let broker = BrokerProcess::start_in(&memory_c, MEMORY, CHANNELS);
    let (mut reader, present) = durable_connect(&broker.address(), "reader");
    assert!(present, "the session came back");
    assert_eq!(consume(&mut reader, 1), vec![8]);
    let (_worker, again, attempt) = take_one_job(&broker.address(), "worker-3");
    assert_eq!((again, attempt), (job, 3));
}

fn stop(mut broker: BrokerProcess) {
    assert!(broker.terminate().success());
}

/// A tool refusing input: a failing exit, one line on stderr naming
/// `named`, containing `says`, and nothing on stdout.
fn assert_refused(args: &[&str], named: &Path, says: &str) {
    let (code, out, err) = saguin(args);
    assert_ne!(code, 0, "{args:?} succeeded: {out}");
    assert!(out.is_empty(), "{args:?} printed {out}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(named.to_str().unwrap()), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn bad_input_is_one_line_naming_the_file_and_a_failing_exit() {
    let dir = TempDir::new("bad-input");
    std::fs::create_dir(dir.path().join("snapshots")).unwrap();
    stop(BrokerProcess::start_in(dir.path(), MEMORY, CHANNELS).tap_publish());
    let snapshots = dir.path().join("snapshots");
    let text = |p: &Path| p.to_str().unwrap().to_string();

    let missing = dir.path().join("missing.redb");
    assert_refused(&["inspect", &text(&missing)], &missing, "check the path");
    assert_refused(
        &["--route", &text(&missing), "a/b"],
        &missing,
        "cannot be read as a file",
    );

    let not_ours = dir.path().join("notes.txt");
    std::fs::write(&not_ours, "hello").unwrap();
    assert_refused(
        &["inspect", &text(&not_ours)],
        &not_ours,
        "neither a redb file nor a snapshot directory",
    );
    let one_file = snapshots.join("events.snapshot");
    assert_refused(
        &["inspect", &text(&one_file)],
        &one_file,
        "give the snapshot directory",
    );

    // A damaged channel file, and one of a format this build does not read.
    let damaged = dir.path().join("damaged");
    copy_dir(&snapshots, &damaged);
    let file = damaged.join("events.snapshot");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    assert_refused(&["inspect", &text(&damaged)], &file, "damaged");
    bytes[middle] ^= 0x40;
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    assert_refused(&["inspect", &text(&damaged)], &file, "snapshot format 99");

    // A redb file another program wrote, and one of a later format.
    let foreign = dir.path().join("foreign.redb");
    write_meta(&foreign, "other", b"x");
    assert_refused(
        &["inspect", &text(&foreign)],
        &foreign,
        "not a Sagüin provider",
    );
    let future = dir.path().join("future.redb");
    write_meta(&future, "format_version", &99u32.to_le_bytes());
    assert_refused(
        &["inspect", &text(&future)],
        &future,
        "redb provider format 99",
    );

    // A redb file cut short, and one with bytes altered after it was written.
    let real = dir.path().join("real.redb");
    assert_eq!(
        saguin(&["--snapshots-to-redb", &text(&snapshots), &text(&real)]).0,
        0
    );
    let whole = std::fs::read(&real).unwrap();
    let cut = dir.path().join("cut.redb");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    assert_refused(&["inspect", &text(&cut)], &cut, "is damaged");
    let altered = dir.path().join("altered.redb");
    let mut bytes = whole.clone();
    for at in (600..bytes.len()).step_by(97) {
        bytes[at] ^= 0xff;
    }
    std::fs::write(&altered, &bytes).unwrap();
    assert_refused(
        &["inspect", &text(&altered)],
        &altered,
        "restore the provider from a backup",
    );

    // Conversions: the wrong kind of source, and a destination that exists.
    let target = dir.path().join("new.redb");
    assert_refused(
        &["--redb-to-snapshots", &text(&snapshots), &text(&target)],
        &snapshots,
        "use --snapshots-to-redb",
    );
    assert_refused(
        &["--snapshots-to-redb", &text(&snapshots), &text(&future)],
        &future,
        "already exists",
    );
    assert!(!target.exists());
    let occupied = dir.path().join("damaged");
    assert_refused(
        &["--redb-to-snapshots", &text(&future), &text(&occupied)],
        &future,
        "redb provider format 99",
    );
}

/// Writes a redb file whose `meta` table holds one key.
fn write_meta(path: &Path, key: &str, value: &[u8]) {
    const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META).unwrap().insert(key, value).unwrap();
    txn.commit().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

trait TapPublish {
    fn tap_publish(self) -> Self;
}

impl TapPublish for BrokerProcess {
    /// Publishes one record to `events`, so a snapshot gets written.
    fn tap_publish(self) -> Self {
        let mut publisher = RawClient::connect(&self.address(), ProtocolVersion::V5, "publisher");
        publish_all(&mut publisher, "events/a", &payloads("x", 1));
        self
    }
}

#[test]
fn route_answers_from_the_configuration_the_broker_runs_with() {
    let dir = TempDir::new("route");
    // The configuration a broker really started on.
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    assert!(broker.terminate().success());
    let config = dir.path().join("saguin.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .args(["--route", config.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"events/a\nstate/b\n# a note\n\njobs/x\nother/y\njobs/#\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "# topic-or-filter\tchannel\ttype\twhy\n\
         events/a\tevents\tappend\tevents/#\n\
         state/b\tstate\tlatest\tstate/#\n\
         jobs/x\tjobs\tqueue\tjobs/#\n\
         other/y\t-\tbroadcast\t-\n\
         jobs/#\tjobs\tqueue\texcluded\n\
         jobs/#\tjobs__dlq\tappend\treplayed\n"
    );
    let (code, out, _) = saguin(&["--route", config.to_str().unwrap(), "state/b"]);
    assert_eq!(code, 0);
    assert!(out.contains("channel    state (latest)"), "{out}");
    assert!(
        out.contains(&format!(
            "provider   local (redb, {}/saguin.redb",
            dir.path().display()
        )),
        "{out}"
    );
    let (code, out, _) = saguin(&["--route", config.to_str().unwrap(), "other/y", "--json"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(
            "{\"subject\":\"other/y\",\"answers\":[{\"channel\":null,\"type\":\"broadcast\""
        ),
        "{out}"
    );
}
