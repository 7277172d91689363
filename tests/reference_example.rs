//! The reference broker's own example configuration (`examples/saguin.yaml`
//! with the files it includes) starts here, with its doors of every kind
//! open: TLS on TCP, WebSocket over TLS and a Unix socket.
//!
//! What is changed, and why: its sqlite provider becomes a redb one,
//! without the sqlite-only `read_connections` (rfcs/0001); its memory
//! provider with no `max_bytes` is given one, since every provider here is
//! bounded (rfcs/0003); `/tmp/saguin-demo`, where the reference's demo
//! copies its files, becomes the test's own directory, where the
//! certificates are made; and its fixed ports become ports the kernel
//! picks, so the test runs beside others.
//!
//! The reference is read from `$SAGUIN_REFERENCE`, or from where the
//! project's checkout keeps it; without it the test says SKIPPED.

mod common;

use std::path::{Path, PathBuf};

use common::certs::Authority;
use common::{connect_packet, BrokerProcess, RawClient, TempDir};
use saguin::codec::ProtocolVersion;

fn reference() -> PathBuf {
    std::env::var_os("SAGUIN_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/shared/reference/saguin-go"))
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The changes the module's comment lists, to one file's text.
fn adapted(text: &str, dir: &Path) -> String {
    let text = text
        .replace("/tmp/saguin-demo", &dir.display().to_string())
        .replace("type: sqlite", "type: redb")
        .replace("127.0.0.1:8883", "127.0.0.1:0")
        .replace("127.0.0.1:1884", "127.0.0.1:0")
        .replace("127.0.0.1:8083", "127.0.0.1:0");
    let snapshots = format!("snapshot_dir: {}/snapshots\n", dir.display());
    let text = text.replacen(
        &snapshots,
        &format!("{snapshots}          max_bytes: 64MiB\n"),
        1,
    );
    text.lines()
        .filter(|line| !line.trim_start().starts_with("read_connections:"))
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn the_reference_example_configuration_starts_with_its_providers_on_redb() {
    let examples = reference().join("examples");
    if !examples.join("saguin.yaml").exists() {
        eprintln!(
            "\n*** SKIPPED the_reference_example_configuration_starts_with_its_providers_on_redb: no reference at {} (set SAGUIN_REFERENCE) ***\n",
            examples.display()
        );
        return;
    }
    let dir = TempDir::new("reference-example");
    copy_tree(&examples, dir.path());
    for file in [
        "support/storage/durable.yaml",
        "support/channels/presence.yaml",
    ] {
        let path = dir.path().join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, adapted(&text, dir.path())).unwrap();
    }
    let tls = dir.path().join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    let authority = Authority::new(&tls, "ca");
    authority.server("broker");
    std::fs::create_dir_all(dir.path().join("snapshots")).unwrap();
    let text = std::fs::read_to_string(dir.path().join("saguin.yaml")).unwrap();
    let config = adapted(&text, dir.path());
    let durable = std::fs::read_to_string(dir.path().join("support/storage/durable.yaml")).unwrap();
    assert!(durable.contains("type: redb"));
    assert!(!durable
        .lines()
        .any(|line| line.trim_start().starts_with("read_connections:")));

    std::fs::write(dir.path().join("checked.yaml"), &config).unwrap();
    let checked = common::check_config(dir.path().join("checked.yaml"));
    assert!(checked.status.success(), "{checked:?}");

    let mut broker = BrokerProcess::start_with_config(dir.path(), &config);
    broker.wait_for_log("listener fleet bound to");
    broker.wait_for_log("listener local bound to");
    broker.wait_for_log("listener ws bound to");
    broker.wait_for_log("listener unix bound to");
    // The socket answers MQTT: its door wants the password file's users.
    let mut client = RawClient::open_unix(&dir.path().join("saguin.sock"), ProtocolVersion::V5);
    assert_eq!(
        client.connect_with(connect_packet(ProtocolVersion::V5, "tool")),
        0x86
    );
    assert!(broker.terminate().success());
}
