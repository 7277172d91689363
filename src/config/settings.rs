//! From a validated configuration to the settings each layer owns: the
//! network shell's, the core's inside it, and the store's per provider.
//! Only this file knows both sides, so `net`, `core` and `store` never
//! read the configuration.

use super::broker::{BrokerConfig, MinProtocolVersion};
use super::channels::{ChannelConfig, ChannelKind, Start};
use super::queue::{Backoff, QueueConfig};
use super::storage::reserve_bytes;
use super::units::MS_PER_S;
use crate::codec::ProtocolVersion;
use crate::core::latest::LatestSettings;
use crate::core::queue::QueueSettings;
use crate::core::queue_rules;
use crate::core::{self, ChannelSettings, ChannelStart};
use crate::net::{self, Door};

/// What the network shell runs with, for `broker` and `channels`.
pub(super) fn shell(
    broker: &BrokerConfig,
    channels: &[ChannelConfig],
    bridges: &[crate::bridge::BridgeSettings],
) -> net::Settings {
    let limits = &broker.limits;
    let providers = named_providers(broker, channels);
    let provider_index = |name: &str| providers.iter().position(|p| p.name == name);
    let mut core = core_settings(broker);
    // A validated configuration names a provider it holds for every
    // channel, the sessions and the retained values.
    core.channels = channels
        .iter()
        .filter_map(|c| Some(channel_settings(c, provider_index(&c.storage)?)))
        .collect();
    core.session_provider = broker.session.storage.as_deref().and_then(provider_index);
    core.retained_provider = broker.retained.storage.as_deref().and_then(provider_index);
    if let Some(index) = core.session_provider {
        core.session_memory_max_bytes = providers[index].max_bytes;
    }
    net::Settings {
        broker_id: broker.id.clone(),
        core,
        doors: broker
            .mqtt
            .doors
            .iter()
            .map(|door| Door {
                name: door.name.clone(),
                listen: door.listen.clone(),
                tls: door.tls.clone(),
            })
            .collect(),
        pid_file: broker.pid_file.clone(),
        max_connect_rate_per_s: limits.max_connect_rate_per_s,
        write_timeout_ms: limits.write_timeout_ms,
        reserve_bytes: reserve_bytes(limits),
        providers,
        bridges: bridges.to_vec(),
        operations: broker.operations.clone(),
    }
}

/// The providers a channel, the session store or the retained store
/// names. Any other is never opened, so its file is neither created nor
/// locked; each is logged once, naming its key.
fn named_providers(
    broker: &BrokerConfig,
    channels: &[ChannelConfig],
) -> Vec<crate::store::ProviderSettings> {
    let Some(storage) = &broker.storage else {
        return Vec::new();
    };
    let stores = [&broker.session.storage, &broker.retained.storage];
    let named = |name: &str| {
        channels.iter().any(|c| c.storage == name)
            || stores.iter().any(|s| s.as_deref() == Some(name))
    };
    let (kept, unused): (Vec<_>, Vec<_>) = storage
        .providers
        .iter()
        .cloned()
        .partition(|p| named(&p.name));
    for provider in unused {
        log::warn!(
            "broker.storage.providers.{}: no channel, broker.session.storage or broker.retained.storage names it, so it is not opened; remove it, or name it where it should be used",
            provider.name
        );
    }
    kept
}

/// The core's limits and clocks; its channels and providers are the
/// caller's to fill in.
fn core_settings(broker: &BrokerConfig) -> core::Settings {
    let limits = &broker.limits;
    core::Settings {
        max_connections: limits.max_connections,
        max_message_size_bytes: limits.max_message_size_bytes,
        max_connect_size_bytes: limits.max_connect_size_bytes,
        max_topic_length: limits.max_topic_length,
        max_topic_levels: limits.max_topic_levels,
        max_client_id_length: limits.max_client_id_length,
        max_header_count: limits.max_header_count,
        max_header_bytes: limits.max_header_bytes,
        max_subscriptions: limits.max_subscriptions,
        max_persistent_sessions: limits.max_persistent_sessions,
        max_shared_groups: limits.max_shared_groups,
        max_session_expiry_s: limits.max_session_expiry_s,
        max_keepalive_s: limits.max_keepalive_s,
        connect_timeout_ms: u64::from(limits.connect_timeout_s) * MS_PER_S,
        session_queue_bytes: limits.session_queue_bytes,
        publish_rate_per_s: limits.publish_rate_per_s,
        publish_bytes_per_s: limits.publish_bytes_per_s,
        min_protocol_version: match broker.mqtt.min_protocol_version {
            MinProtocolVersion::V311 => ProtocolVersion::V311,
            MinProtocolVersion::V5 => ProtocolVersion::V5,
        },
        ack_commit_interval_ms: broker.session.ack_commit_interval_ms,
        retained_retention_period_s: broker.retained.retention_period_s,
        qos2_max_inflight_per_client: broker.qos2.max_inflight_per_client,
        qos2_expires_after_ms: u64::from(broker.qos2.expires_after_s) * MS_PER_S,
        share_expires_after_ms: broker
            .share
            .expires_after_s
            .map(|s| u64::from(s) * MS_PER_S),
        ..core::Settings::default()
    }
}

/// One channel on provider `provider`, before its provider is read: no
/// records, no values, no jobs yet.
fn channel_settings(channel: &ChannelConfig, provider: usize) -> ChannelSettings {
    ChannelSettings {
        name: channel.name.clone(),
        filters: channel.filters.clone(),
        provider,
        start: match channel.start {
            Start::Floor => ChannelStart::Floor,
            Start::Tail => ChannelStart::Tail,
        },
        max_bytes: channel.max_bytes,
        retention_period_s: channel.retention_period_s,
        retention_bytes: channel.retention_bytes,
        next: 0,
        floor: 0,
        written_filter: channel.filter.clone(),
        latest: match channel.kind {
            ChannelKind::Latest {
                deletion_retention_period_s,
            } => Some(LatestSettings {
                deletion_retention_period_s,
                values: Vec::new(),
            }),
            _ => None,
        },
        queue: match channel.kind {
            ChannelKind::Queue(queue) => Some(queue_settings(&queue)),
            _ => None,
        },
    }
}

fn queue_settings(queue: &QueueConfig) -> QueueSettings {
    QueueSettings {
        visibility_timeout_ms: queue.visibility_timeout_s * MS_PER_S,
        job_expires_after_ms: queue.job_expires_after_s.map(|s| s * MS_PER_S),
        max_attempts: queue.max_attempts,
        backoff: match queue.backoff {
            Backoff::None => queue_rules::Backoff::None,
            Backoff::Linear => queue_rules::Backoff::Linear,
            Backoff::Exponential => queue_rules::Backoff::Exponential,
        },
        backoff_base_ms: queue.backoff_base_s * MS_PER_S,
        held: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use crate::core::queue_rules;
    use crate::core::ChannelStart;
    use crate::net::{Door, Listen};

    const YAML: &str = "\
broker:
  id: gw-1
  pid_file: /run/saguin.pid
  mqtt:
    listen:
      tcp:
        - {name: inside, address: '127.0.0.1:1883'}
        - {name: outside, address: ':8883'}
    min_protocol_version: 5
  limits:
    max_message_size: 64KiB
    max_header_bytes: 1KiB
    connect_timeout: 3s
    write_timeout: 2s
    max_connect_rate: none
  qos2:
    expires_after: 1m
  share:
    expires_after: 2s
  session:
    storage: second
  retained:
    storage: first
    retention_period: 1h
  storage:
    default: first
    default_retention_period: none
    default_retention_bytes: none
    providers:
      first: {type: memory, max_bytes: 16MiB, snapshot_dir: none}
      second: {type: memory, max_bytes: 8MiB, snapshot_dir: none}
channels:
  log: {type: append, filter: 'log/{a,b}', start: tail, retention_period: 1d}
  jobs:
    type: queue
    storage: second
    visibility_timeout: 10s
    retry: {max_attempts: 3, backoff: linear, backoff_base: 2s}
  state: {type: latest, deletion_retention_period: 5m}
";

    #[test]
    fn each_layer_gets_its_settings_in_its_own_units() {
        let shell = parse(YAML, "t.yaml").unwrap().shell_settings();
        assert_eq!(shell.broker_id, "gw-1");
        assert_eq!(
            shell.doors,
            [
                Door {
                    name: "inside".into(),
                    listen: Listen::Tcp {
                        address: "127.0.0.1:1883".into()
                    },
                    tls: None,
                },
                Door {
                    name: "outside".into(),
                    listen: Listen::Tcp {
                        address: "0.0.0.0:8883".into()
                    },
                    tls: None,
                }
            ]
        );
        assert_eq!(shell.pid_file.as_deref(), Some("/run/saguin.pid".as_ref()));
        assert_eq!(shell.max_connect_rate_per_s, None);
        assert_eq!(shell.write_timeout_ms, Some(2_000));
        assert_eq!(shell.reserve_bytes, 64 * 1024 + 1024);
        let names: Vec<&str> = shell.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["first", "second"]);

        let core = &shell.core;
        assert_eq!(core.max_message_size_bytes, 64 * 1024);
        assert_eq!(core.connect_timeout_ms, 3_000);
        assert_eq!(core.min_protocol_version, crate::codec::ProtocolVersion::V5);
        assert_eq!(core.qos2_expires_after_ms, 60_000);
        assert_eq!(core.share_expires_after_ms, Some(2_000));
        assert_eq!(core.retained_retention_period_s, Some(3_600));
        assert_eq!(
            (core.session_provider, core.retained_provider),
            (Some(1), Some(0))
        );

        let by_name = |name: &str| core.channels.iter().find(|c| c.name == name).unwrap();
        let log = by_name("log");
        assert_eq!((log.provider, log.start), (0, ChannelStart::Tail));
        assert_eq!(log.filters, ["log/a", "log/b"]);
        assert_eq!(log.written_filter, "log/{a,b}");
        assert_eq!(log.retention_period_s, Some(86_400));
        assert!(log.latest.is_none() && log.queue.is_none());

        let jobs = by_name("jobs");
        assert_eq!(jobs.provider, 1);
        let queue = jobs.queue.as_ref().unwrap();
        assert_eq!(queue.visibility_timeout_ms, 10_000);
        assert_eq!(queue.max_attempts, 3);
        assert_eq!(queue.backoff, queue_rules::Backoff::Linear);
        assert_eq!(queue.backoff_base_ms, 2_000);
        // The dead-letter channel the queue derives is on the queue's provider.
        assert_eq!(by_name("jobs__dlq").provider, 1);

        let state = by_name("state");
        assert_eq!(
            state.latest.as_ref().unwrap().deletion_retention_period_s,
            Some(300)
        );
        let order: Vec<&str> = core.channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(order, ["log", "jobs", "state", "jobs__dlq"]);
    }
}
