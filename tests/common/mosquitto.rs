//! Debian's `mosquitto` as a peer the tests start and stop: a bridge's
//! upstream, or a broker beside this one.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::WAIT;

pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

/// A port nothing listens on now; the peer is started on it later.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn have_mosquitto(test: &str) -> bool {
    let found = Path::new(MOSQUITTO).exists();
    if !found {
        eprintln!(
            "\n*** SKIPPED {test}: {MOSQUITTO} is not installed (apt-get install mosquitto) ***\n"
        );
    }
    found
}

/// A mosquitto broker on a fixed port, persisting its sessions in `dir`
/// so that a subscriber's queue outlives a restart of it.
pub struct Mosquitto {
    child: Child,
    port: u16,
}

impl Mosquitto {
    pub fn start(dir: &Path, port: u16) -> Mosquitto {
        Mosquitto::start_with(dir, port, "")
    }

    /// With `extra` appended to its configuration: another listener, say.
    pub fn start_with(dir: &Path, port: u16, extra: &str) -> Mosquitto {
        // Started as root, mosquitto writes its database as its own user.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let config = dir.join("mosquitto.conf");
        std::fs::write(
            &config,
            format!(
                "allow_anonymous true\npersistence true\npersistence_location {}/\nmax_queued_messages 100000\nlistener {port} 127.0.0.1\n{extra}",
                dir.display()
            ),
        )
        .unwrap();
        let child = Command::new(MOSQUITTO)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto");
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "mosquitto did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Mosquitto { child, port }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGTERM, so that it writes its sessions to disk.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
