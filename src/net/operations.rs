//! Starts the operations listener beside the broker: its doors are bound
//! with the MQTT doors, its thread is given a [`Link`] to this executor,
//! and this executor answers the link's questions from the core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_executor::StaticLocalExecutor;

use super::SharedRef;
use crate::ops::{self, Link, Provider};
use crate::store::{
    Backups, CommitPolicy, ProviderKind, ProviderSettings, StorageHandle, StorageWatch,
};

/// How long the executor may go without turning before `/health` says a
/// restart would help. The tick runs every 100 ms, so this is a wedge, not
/// a busy moment.
const HEALTH_STALL_MS: u64 = 10_000;
/// How often the executor says it is turning.
const HEARTBEAT_MS: u64 = 500;

/// Starts serving `bound` on its own thread; the returned tasks answer it
/// here and must live as long as the broker serves, and the socket files
/// go when the returned guard does.
/// What the listener is told of the broker's configuration.
pub struct Shell<'a> {
    pub broker_id: &'a str,
    pub providers: &'a [ProviderSettings],
    /// The MQTT doors, for `/v1/operations/users`.
    pub doors: &'a [super::Door],
}

pub fn start(
    executor: &'static StaticLocalExecutor,
    shared: &SharedRef,
    shell: Shell<'_>,
    storage: &super::storage::Storage,
    bound: ops::Bound,
    bridges: super::bridge::Observer,
) -> std::io::Result<(Vec<smol::Task<()>>, ops::SocketFiles)> {
    let watches = storage.watches();
    let started = Instant::now();
    let beat_ms = Arc::new(AtomicU64::new(0));
    let healthy = {
        let beat_ms = beat_ms.clone();
        let watches = watches.clone();
        Arc::new(move || {
            let now_ms = started.elapsed().as_millis() as u64;
            healthy(now_ms, beat_ms.load(Ordering::Relaxed), &watches)
        })
    };
    let (mut link, asks) = Link::new(
        shell.broker_id.to_string(),
        healthy,
        providers(shell.providers, &watches, &storage.handles),
    );
    link.backups = Backups::new(shell.providers, &storage.handles);
    link.mqtt_doors = shell.doors.iter().map(certificate_rule).collect();
    let sockets = bound.spawn(link)?;
    let heartbeat = executor.spawn(async move {
        loop {
            beat_ms.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            smol::Timer::after(Duration::from_millis(HEARTBEAT_MS)).await;
        }
    });
    let shared = shared.clone();
    let answers = executor.spawn(async move {
        while let Ok(ask) = asks.recv().await {
            let state = shared.borrow();
            ops::answer(ask, &state.broker, &|| bridges.observe(), state.now_ms());
        }
    });
    Ok((vec![heartbeat, answers], sockets))
}

/// Whether a restart would not help: the executor beat within
/// [`HEALTH_STALL_MS`] of `now_ms` and every storage thread still runs.
/// A provider whose device failed is named by `/health` itself.
fn healthy(now_ms: u64, beat_ms: u64, watches: &[StorageWatch]) -> bool {
    let turning = now_ms.saturating_sub(beat_ms) < HEALTH_STALL_MS;
    turning && !watches.iter().any(StorageWatch::stopped)
}

/// An MQTT door's name and whether it asks for a client certificate, as
/// `/v1/operations/users` names it.
fn certificate_rule(door: &super::Door) -> (String, &'static str) {
    let rule = match &door.tls {
        Some(tls) if tls.client_ca_file.is_some() && tls.require_certificate => "required",
        Some(tls) if tls.client_ca_file.is_some() => "accepted",
        _ => "none",
    };
    (door.name.clone(), rule)
}

fn providers(
    written: &[ProviderSettings],
    watches: &[StorageWatch],
    handles: &[StorageHandle],
) -> Vec<Provider> {
    written
        .iter()
        .zip(watches)
        .zip(handles)
        .map(|((provider, watch), handle)| {
            let (kind, publish_commit_max_records) = match &provider.kind {
                ProviderKind::Redb { commit, .. } => (
                    "redb",
                    Some(match commit {
                        CommitPolicy::Collect => crate::store::COLLECT_MAX_RECORDS,
                        CommitPolicy::PerPublish => 0,
                        CommitPolicy::Interval { max_records, .. } => *max_records,
                    }),
                ),
                ProviderKind::Memory { .. } => ("memory", None),
            };
            let watch = watch.clone();
            let handle = handle.clone();
            Provider {
                channel_bytes: Arc::new(move |reply| handle.try_channel_bytes(reply).is_ok()),
                name: provider.name.clone(),
                kind,
                max_bytes: provider.max_bytes,
                publish_commit_max_records,
                device_endurance_bytes: provider.device_endurance_bytes,
                written_bytes: {
                    let watch = watch.clone();
                    Arc::new(move || {
                        watch
                            .thread_id()
                            .and_then(crate::ops::process::thread_written_bytes)
                    })
                },
                failure: {
                    let watch = watch.clone();
                    Arc::new(move || watch.failure())
                },
                commits: Arc::new(move || watch.stats()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryProvider, StorageThread};

    #[test]
    fn a_stalled_executor_or_an_ended_storage_thread_is_unhealthy() {
        let provider = MemoryProvider::open("m", 1 << 20, 0, None).unwrap();
        let thread =
            StorageThread::spawn(Box::new(provider), CommitPolicy::Collect, 4, |_| {}).unwrap();
        let watches = vec![thread.watch()];
        assert!(healthy(20_000, 19_500, &watches));
        assert!(!healthy(20_000, 20_000 - HEALTH_STALL_MS, &watches));
        thread.shutdown().unwrap();
        assert!(!healthy(20_000, 19_500, &watches));
    }
}
