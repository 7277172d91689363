//! The Unix socket a door listens on, an MQTT door's or an operations
//! door's, served by one broker at a time.
//!
//! A socket at `path` is held by the lock file `<path>.lock` for as long
//! as the broker runs. What a starting broker finds decides what it does:
//! nothing at the path, and the socket is made; a socket whose lock is
//! free, left by a broker that crashed or lost power, and it is replaced,
//! so an unattended restart comes back with nobody removing a file; a
//! socket whose lock is held, and the door is refused, naming the lock;
//! anything else at the path, and the door is refused and the file left
//! alone. At a clean stop the socket is removed before the lock is let go,
//! so a broker only ever removes its own. A name starting with `@` is an
//! abstract socket: it has no file, so it takes no lock and no mode.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// A bound socket's file and its lock: dropping it removes the file, then
/// releases the lock.
#[must_use = "dropping it removes the socket file at once"]
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    // Held, never read: closing it is what releases the lock.
    _lock: File,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The lock file that guards the socket at `path`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// Whether `path` names an abstract socket rather than a file.
pub fn is_abstract(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().first() == Some(&b'@')
}

/// Binds a non-blocking listener at `path` by the rules above and gives
/// the socket file `mode`. `None` in place of the file for an abstract
/// socket. An error says what was found and what to do.
pub fn bind(path: &Path, mode: u32) -> io::Result<(UnixListener, Option<SocketFile>)> {
    if is_abstract(path) {
        use std::os::linux::net::SocketAddrExt;
        let name = &path.as_os_str().as_encoded_bytes()[1..];
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        let listener = UnixListener::bind_addr(&address)?;
        listener.set_nonblocking(true)?;
        return Ok((listener, None));
    }
    let lock_path = lock_path(path);
    let lock = crate::lock_file::take_exclusive(&lock_path).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot take the lock file {}: {error}", lock_path.display()),
        )
    })?;
    let Some(lock) = lock else {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another running broker serves it: {} is locked; stop that broker, or give this door another path",
                lock_path.display()
            ),
        ));
    };
    match std::fs::symlink_metadata(path) {
        // Left by a broker that stopped without removing it: the lock is
        // free, so nobody serves it.
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; it is left alone: remove it, or give this door another path",
                    path.display()
                ),
            ))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let listener = UnixListener::bind(path)?;
    let file = SocketFile {
        path: path.to_path_buf(),
        _lock: lock,
    };
    listener.set_nonblocking(true)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot set the socket's mode to {mode:04o}: {error}"),
        )
    })?;
    Ok((listener, Some(file)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("saguin-unix-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_served_one_refused_naming_its_lock() {
        let dir = dir("stale");
        let path = dir.join("s.sock");
        // A socket left behind: bound, then forgotten without removing it.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let (first, file) = bind(&path, 0o660).expect("a stale socket is replaced");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let refused = bind(&path, 0o660).expect_err("a served socket is not taken over");
        let said = refused.to_string();
        assert!(said.contains("s.sock.lock is locked"), "{said}");
        assert!(path.exists(), "the refusal removed nothing");
        drop(first);
        drop(file);
        assert!(!path.exists(), "a clean stop removes its socket");
        assert!(lock_path(&path).exists(), "and keeps the lock file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_left_alone() {
        let dir = dir("file");
        let path = dir.join("s.sock");
        std::fs::write(&path, "data").unwrap();
        let said = bind(&path, 0o660).unwrap_err().to_string();
        assert!(said.contains("is not a socket"), "{said}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_abstract_name_takes_no_file() {
        let name = format!("@saguin-test-{}", std::process::id());
        let (listener, file) = bind(Path::new(&name), 0o660).unwrap();
        assert!(file.is_none());
        assert!(listener.local_addr().unwrap().as_pathname().is_none());
    }
}
