//! The online backup's way in: which providers can be copied while the
//! broker runs, and the storage thread that owns each. The shell builds it
//! from its storage threads and hands it to whatever starts a backup (the
//! operations listener), on any thread: asking a storage thread never
//! touches the executor.

use std::path::{Path, PathBuf};

use super::backup::{BackupReply, SharedReply};
use super::error::StoreError;
use super::settings::{ProviderKind, ProviderSettings};
use super::writer::StorageHandle;

/// The redb providers, by name, with their storage threads.
#[derive(Clone, Default)]
pub struct Backups {
    providers: Vec<(String, StorageHandle)>,
}

impl Backups {
    /// The redb providers among `written`, whose storage threads are
    /// `handles` in the same order. A memory provider is left out: its
    /// copy is its snapshot directory, written at a graceful stop.
    pub fn new(written: &[ProviderSettings], handles: &[StorageHandle]) -> Backups {
        let providers = written
            .iter()
            .zip(handles)
            .filter(|(p, _)| matches!(p.kind, ProviderKind::Redb { .. }))
            .map(|(p, h)| (p.name.clone(), h.clone()))
            .collect();
        Backups { providers }
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.providers.iter().map(|(name, _)| name.as_str())
    }

    /// Asks every redb provider for a backup into `dir`, as
    /// `<provider>-<stamp>.redb`: a file per provider, since each is a
    /// database consistent in itself and not with the others. `reply_for`
    /// gives each provider's answer its way back; one whose storage thread
    /// cannot take the request now is answered at once. Returns each
    /// provider's name and file.
    pub fn start_all(
        &self,
        dir: &Path,
        stamp: &str,
        mut reply_for: impl FnMut(&str) -> BackupReply,
    ) -> Vec<(String, PathBuf)> {
        self.providers
            .iter()
            .map(|(name, handle)| {
                let destination = dir.join(format!("{name}-{stamp}.redb"));
                // Shared, so that a request the thread refuses is answered.
                let reply = SharedReply::new(reply_for(name));
                let taken = reply.clone();
                let asked = handle.try_backup(
                    destination.clone(),
                    Box::new(move |result| taken.answer(result)),
                );
                if let Err(refused) = asked {
                    reply.answer(Err(StoreError::Invalid(format!(
                        "provider {name} cannot take the request now ({refused:?}); try again shortly"
                    ))));
                }
                (name.clone(), destination)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{open_provider, CommitPolicy, Provider as _, RedbProvider, StorageThread};

    #[test]
    fn every_redb_provider_is_copied_into_its_own_file_and_memory_is_left_out() {
        let dir = std::env::temp_dir().join(format!("saguin-store-backups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let written = vec![
            ProviderSettings {
                name: "local".into(),
                max_bytes: 1 << 20,
                kind: ProviderKind::Redb {
                    file_path: dir.join("local.redb"),
                    commit: CommitPolicy::Collect,
                    checkpoint_interval_ms: crate::store::DEFAULT_CHECKPOINT_INTERVAL_MS,
                },
                device_endurance_bytes: None,
            },
            ProviderSettings {
                name: "volatile".into(),
                max_bytes: 1 << 20,
                kind: ProviderKind::Memory { snapshot_dir: None },
                device_endurance_bytes: None,
            },
        ];
        let threads: Vec<StorageThread> = written
            .iter()
            .map(|p| {
                let provider = open_provider(p, 0).unwrap();
                StorageThread::spawn(provider, p.commit_policy(), 16, |_| {}).unwrap()
            })
            .collect();
        let handles: Vec<_> = threads.iter().map(StorageThread::handle).collect();
        let backups = Backups::new(&written, &handles);
        assert_eq!(backups.names().collect::<Vec<_>>(), ["local"]);
        let (tx, answers) = std::sync::mpsc::channel();
        let started = backups.start_all(&dir, "stamp", |_| {
            let tx = tx.clone();
            Box::new(move |result| {
                let _ = tx.send(result);
            })
        });
        assert_eq!(started.len(), 1);
        let (name, destination) = &started[0];
        assert_eq!(
            (name.as_str(), destination),
            ("local", &dir.join("local-stamp.redb"))
        );
        let report = answers.recv().unwrap().unwrap();
        assert_eq!(report.provider, "local");
        for thread in threads {
            thread.shutdown().unwrap();
        }
        let copy = RedbProvider::open("copy", destination, 1 << 20, 0).unwrap();
        assert!(copy.channels().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
