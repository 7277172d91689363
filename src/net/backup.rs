//! The online backup's way in: which providers can be copied while the
//! broker runs, and the storage thread that owns each. Held by whatever
//! starts a backup (the operations listener), on any thread: asking a
//! storage thread never touches the executor.

use std::path::{Path, PathBuf};

use crate::store::{BackupReport, ProviderKind, ProviderSettings, StorageHandle, StoreError};

/// A backup's answer, awaited on the thread that asked.
pub type BackupAnswer = smol::channel::Receiver<Result<BackupReport, StoreError>>;

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
    /// `<provider>-<stamp>.redb`: a provider per file, since each is a
    /// database consistent in itself and not with the others. Each gets
    /// its own answer; one whose storage thread cannot take the request
    /// now is answered at once.
    pub fn start_all(&self, dir: &Path, stamp: &str) -> Vec<(String, PathBuf, BackupAnswer)> {
        self.providers
            .iter()
            .map(|(name, handle)| {
                let destination = dir.join(format!("{name}-{stamp}.redb"));
                let (tx, rx) = smol::channel::bounded(1);
                let reply_tx = tx.clone();
                let asked = handle.try_backup(
                    destination.clone(),
                    Box::new(move |result| {
                        let _ = reply_tx.try_send(result);
                    }),
                );
                if let Err(refused) = asked {
                    let _ = tx.try_send(Err(StoreError::Invalid(format!(
                        "provider {name} cannot take the request now ({refused:?}); try again shortly"
                    ))));
                }
                (name.clone(), destination, rx)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{open_provider, CommitPolicy, Provider as _, StorageThread};

    #[test]
    fn every_redb_provider_is_copied_into_its_own_file_and_memory_is_left_out() {
        let dir = std::env::temp_dir().join(format!("saguin-net-backup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let written = vec![
            ProviderSettings {
                name: "local".into(),
                max_bytes: 1 << 20,
                kind: ProviderKind::Redb {
                    file_path: dir.join("local.redb"),
                    commit: CommitPolicy::Collect,
                },
            },
            ProviderSettings {
                name: "volatile".into(),
                max_bytes: 1 << 20,
                kind: ProviderKind::Memory { snapshot_dir: None },
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
        let started = backups.start_all(&dir, "stamp");
        assert_eq!(started.len(), 1);
        let (name, destination, answer) = &started[0];
        assert_eq!(
            (name.as_str(), destination),
            ("local", &dir.join("local-stamp.redb"))
        );
        let report = smol::block_on(answer.recv()).unwrap().unwrap();
        assert_eq!(report.provider, "local");
        for thread in threads {
            thread.shutdown().unwrap();
        }
        let copy = crate::store::RedbProvider::open("copy", destination, 1 << 20, 0).unwrap();
        assert!(copy.channels().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
