//! The storage threads, one per provider, and the path their answers take
//! back to the executor thread.

use std::io;

use smol::channel::{Receiver, Sender};

use super::latest_index;
use crate::config::{self, Config};
use crate::core::{ChannelSettings, ChannelStart};
use crate::store::{self, Completion, StorageHandle, StorageThread};

/// Requests one provider's storage thread may have queued before a new one
/// is refused as "behind": a bound on memory, not a throughput knob.
const STORAGE_QUEUE_REQUESTS: usize = 4_096;

pub struct Storage {
    threads: Vec<StorageThread>,
    pub handles: Vec<StorageHandle>,
    /// What the broker restores at start, read before the providers moved
    /// to their threads.
    pub restored: Restored,
}

/// The session and retained spaces as the providers held them at start.
#[derive(Default)]
pub struct Restored {
    /// Index of the provider `broker.session.storage` names.
    pub session_provider: Option<usize>,
    pub sessions: Vec<(String, Vec<u8>)>,
    /// What the broadcast log holds for them.
    pub log: crate::core::LogAtStart,
    /// Exactly-once publishes held unreleased at the stop, wherever kept.
    pub holds: Vec<crate::core::StoredHold>,
    /// Index of the provider `broker.retained.storage` names.
    pub retained_provider: Option<usize>,
    pub retained: Vec<(String, Vec<u8>)>,
}

/// Opens every provider the configuration names, reads where each channel
/// stands, and starts a storage thread per provider. Answers arrive on the
/// returned receiver, tagged with their provider's index.
/// What starting storage gives the shell: the threads, where each channel
/// stands, and where the threads' answers arrive.
pub type Started = (Storage, Vec<ChannelSettings>, Receiver<(usize, Completion)>);

pub fn start(config: &Config) -> io::Result<Started> {
    let (sender, receiver) = smol::channel::unbounded();
    let mut storage = Storage {
        threads: Vec::new(),
        handles: Vec::new(),
        restored: Restored::default(),
    };
    let mut channels = Vec::new();
    let Some(storage_config) = &config.broker.storage else {
        return Ok((storage, channels, receiver));
    };
    let reserve_bytes = config::reserve_bytes(&config.broker.limits);
    // Each memory provider may be reasonable alone and too much together:
    // the total is said where somebody is looking.
    log::info!(
        "memory providers declare {} bytes in all",
        config::declared_memory_bytes(storage_config)
    );
    for (index, provider_config) in storage_config.providers.iter().enumerate() {
        let mut provider = store::open_provider(provider_config, reserve_bytes).map_err(to_io)?;
        let usage = provider.usage();
        log::info!(
            "storage provider {} open: {} of {} bytes used, {} held in reserve",
            provider_config.name,
            usage.used_bytes,
            usage.max_bytes,
            usage.reserve_bytes
        );
        for channel in config
            .channels
            .iter()
            .filter(|c| c.storage == provider_config.name)
        {
            let latest = latest_index::latest_settings(&mut *provider, channel).map_err(to_io)?;
            let state = provider.channel(&channel.name);
            log::info!(
                "channel {} on {}: floor {}, next {}",
                channel.name,
                provider_config.name,
                state.floor,
                state.next
            );
            let mut settings = channel_settings(channel, index, state.next, state.floor);
            settings.latest = latest;
            if let config::ChannelKind::Queue(queue) = channel.kind {
                let loaded = super::queue_load::queue_settings(&*provider, &channel.name, &queue);
                settings.queue = Some(loaded.map_err(to_io)?);
            }
            channels.push(settings);
            read_holds(
                provider.as_ref(),
                index,
                &channel.name,
                &mut storage.restored.holds,
            )
            .map_err(to_io)?;
        }
        if config.broker.session.storage.as_deref() == Some(provider_config.name.as_str()) {
            let restored = &mut storage.restored;
            restored.session_provider = Some(index);
            restored.sessions = provider
                .entries(crate::core::SESSIONS_SPACE)
                .map_err(to_io)?;
            restored.log = crate::core::read_log(
                provider.as_ref(),
                &restored.sessions,
                config.broker.limits.session_queue_bytes,
            )
            .map_err(to_io)?;
            read_holds(
                provider.as_ref(),
                index,
                crate::core::BROADCAST_SPACE,
                &mut restored.holds,
            )
            .map_err(to_io)?;
            log::info!(
                "sessions kept on {}: {} stored, {} broadcast messages owed to them",
                provider_config.name,
                restored.sessions.len(),
                restored.log.records.len()
            );
        }
        if config.broker.retained.storage.as_deref() == Some(provider_config.name.as_str()) {
            let restored = &mut storage.restored;
            restored.retained_provider = Some(index);
            restored.retained = provider
                .entries(crate::core::RETAINED_SPACE)
                .map_err(to_io)?;
            log::info!(
                "retained values kept on {}: {} stored",
                provider_config.name,
                restored.retained.len()
            );
        }
        let thread = StorageThread::spawn(
            provider,
            provider_config.commit_policy(),
            STORAGE_QUEUE_REQUESTS,
            deliver_to(sender.clone(), index),
        )
        .map_err(to_io)?;
        storage.handles.push(thread.handle());
        storage.threads.push(thread);
    }
    // The core addresses channels in configuration order.
    channels.sort_by_key(|c| config.channels.iter().position(|d| d.name == c.name));
    Ok((storage, channels, receiver))
}

/// The exactly-once publishes a space holds unreleased.
fn read_holds(
    provider: &dyn store::Provider,
    index: usize,
    space: &str,
    holds: &mut Vec<crate::core::StoredHold>,
) -> Result<(), store::StoreError> {
    for (key, value) in provider.entries(space)? {
        if crate::core::is_hold_key(&key) {
            holds.push(crate::core::StoredHold {
                provider: index,
                space: space.to_string(),
                key,
                value,
            });
        }
    }
    Ok(())
}

fn channel_settings(
    channel: &config::ChannelConfig,
    provider: usize,
    next: u64,
    floor: u64,
) -> ChannelSettings {
    ChannelSettings {
        name: channel.name.clone(),
        filters: channel.filters.clone(),
        provider,
        start: match channel.start {
            config::Start::Floor => ChannelStart::Floor,
            config::Start::Tail => ChannelStart::Tail,
        },
        max_bytes: channel.max_bytes,
        retention_period_s: channel.retention_period_s,
        retention_bytes: channel.retention_bytes,
        next,
        floor,
        written_filter: channel.filter.clone(),
        latest: None,
        queue: None,
    }
}

fn deliver_to(
    sender: Sender<(usize, Completion)>,
    provider: usize,
) -> impl FnMut(Completion) + Send + 'static {
    move |completion| {
        // Unbounded, but never longer than the requests in flight.
        let _ = sender.try_send((provider, completion));
    }
}

impl Storage {
    /// Every storage thread's counters, in provider order.
    pub fn watches(&self) -> Vec<store::StorageWatch> {
        self.threads.iter().map(StorageThread::watch).collect()
    }

    /// Stops every storage thread once what it was asked has been done; a
    /// memory provider writes its snapshot here.
    pub fn shutdown(self) {
        for thread in self.threads {
            if let Err(error) = thread.shutdown() {
                log::error!("storage did not close cleanly: {error}");
            }
        }
    }
}

fn to_io(error: store::StoreError) -> io::Error {
    io::Error::other(error.to_string())
}
