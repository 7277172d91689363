//! The storage threads, one per provider, and the path their answers take
//! back to the executor thread.

use std::io;

use smol::channel::{Receiver, Sender};

use super::Settings;
use crate::core::channel_load;
use crate::store::{self, Completion, StorageHandle, StorageThread};

/// Requests one provider's storage thread may have queued before a new one
/// is refused as "behind": a bound on memory, not a throughput knob.
pub(super) const STORAGE_QUEUE_REQUESTS: usize = 4_096;

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
    pub sessions: Vec<(String, Vec<u8>)>,
    /// What the broadcast log holds for them.
    pub log: crate::core::LogAtStart,
    /// Exactly-once publishes held unreleased at the stop, wherever kept.
    pub holds: Vec<crate::core::StoredHold>,
    pub retained: Vec<(String, Vec<u8>)>,
}

/// Opens every provider `settings` names, reads what each holds for the
/// core into `settings.core` and [`Storage::restored`], and starts a
/// storage thread per provider. Answers arrive on the returned receiver,
/// tagged with their provider's index.
pub fn start(settings: &mut Settings) -> io::Result<(Storage, Receiver<(usize, Completion)>)> {
    let (sender, receiver) = smol::channel::unbounded();
    let mut storage = Storage {
        threads: Vec::new(),
        handles: Vec::new(),
        restored: Restored::default(),
    };
    if settings.providers.is_empty() {
        return Ok((storage, receiver));
    }
    let core = &mut settings.core;
    // Each memory provider may be reasonable alone and too much together:
    // the total is said where somebody is looking.
    log::info!(
        "memory providers declare {} bytes in all",
        store::declared_memory_bytes(&settings.providers)
    );
    let mut providers = Vec::with_capacity(settings.providers.len());
    for (index, provider_settings) in settings.providers.iter().enumerate() {
        let mut provider =
            store::open_provider(provider_settings, settings.reserve_bytes).map_err(to_io)?;
        let usage = provider.usage();
        log::info!(
            "storage provider {} open: {} of {} bytes used, {} held in reserve",
            provider_settings.name,
            usage.used_bytes,
            usage.max_bytes,
            usage.reserve_bytes
        );
        // A provider standing failed (its file damaged, moved aside) holds
        // nothing and takes no type stamp: its channels start empty.
        let failed = provider.failure().is_some();
        for channel in core.channels.iter_mut().filter(|c| c.provider == index) {
            if !failed {
                channel_load::check_type(&mut *provider, channel)
                    .map_err(|message| io::Error::new(io::ErrorKind::InvalidData, message))?;
            }
            channel_load::load_at_start(&mut *provider, channel).map_err(to_io)?;
            log::info!(
                "channel {} on {}: floor {}, next {}",
                channel.name,
                provider_settings.name,
                channel.floor,
                channel.next
            );
            read_holds(
                provider.as_ref(),
                index,
                &channel.name,
                &mut storage.restored.holds,
            )
            .map_err(to_io)?;
        }
        if core.session_provider == Some(index) {
            let restored = &mut storage.restored;
            restored.sessions = provider
                .entries(crate::core::SESSIONS_SPACE)
                .map_err(to_io)?;
            restored.log = crate::core::read_log(
                provider.as_ref(),
                &restored.sessions,
                core.session_queue_bytes,
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
                provider_settings.name,
                restored.sessions.len(),
                restored.log.records.len()
            );
        }
        if core.retained_provider == Some(index) {
            let restored = &mut storage.restored;
            restored.retained = provider
                .entries(crate::core::RETAINED_SPACE)
                .map_err(to_io)?;
            log::info!(
                "retained values kept on {}: {} stored",
                provider_settings.name,
                restored.retained.len()
            );
        }
        providers.push(provider);
    }
    if let Some(index) = core.retained_provider {
        crate::core::channel::claimed_retained::move_into_latest_channels(
            &mut providers,
            &mut core.channels,
            index,
            &mut storage.restored.retained,
        )
        .map_err(to_io)?;
    }
    for ((index, provider_settings), provider) in
        settings.providers.iter().enumerate().zip(providers)
    {
        let thread = StorageThread::spawn(
            provider,
            provider_settings.commit_policy(),
            STORAGE_QUEUE_REQUESTS,
            deliver_to(sender.clone(), index),
        )
        .map_err(to_io)?;
        storage.handles.push(thread.handle());
        storage.threads.push(thread);
    }
    Ok((storage, receiver))
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
