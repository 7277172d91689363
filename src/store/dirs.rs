//! Directories made to survive a power cut: a new directory's name is an
//! entry in its parent, durable only once that parent is synced.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

/// Creates `path` and any missing parent, as `create_dir_all` does, then
/// syncs the parent of every directory it created, and the parent of
/// `path` whatever it found (a start after a power cut may meet a
/// directory an earlier start created and never synced). Returns the
/// directories synced, shallowest first.
pub fn create_dir_all_synced(path: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = path;
    loop {
        match fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(at.to_path_buf()),
            Err(e) => return Err(e),
        }
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    fs::create_dir_all(path)?;
    let mut synced: Vec<PathBuf> = Vec::new();
    for dir in missing.iter().rev().map(PathBuf::as_path).chain([path]) {
        let parent = parent_of(dir);
        if !synced.contains(&parent) {
            File::open(&parent).and_then(|d| d.sync_all())?;
            synced.push(parent);
        }
    }
    Ok(synced)
}

/// The directory holding `path`'s entry: `.` for a bare name.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::TempDir;
    use super::*;

    #[test]
    fn every_directory_created_has_its_parent_synced() {
        let dir = TempDir::new("dirs-synced");
        let base = dir.path().to_path_buf();
        let deep = base.join("a").join("b").join("c");
        let synced = create_dir_all_synced(&deep).expect("create");
        assert!(deep.is_dir());
        assert_eq!(
            synced,
            vec![base.clone(), base.join("a"), base.join("a").join("b")]
        );
        // Found in place: the parent of the last is synced all the same.
        let again = create_dir_all_synced(&deep).expect("again");
        assert_eq!(again, vec![base.join("a").join("b")]);
    }
}
