//! Debian's `mosquitto` broker, run by a test on a configuration and a
//! port of its own.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::WAIT;

pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

/// True when the broker is installed; otherwise says loudly that `test`
/// was skipped.
pub fn have_mosquitto(test: &str) -> bool {
    let found = Path::new(MOSQUITTO).exists();
    if !found {
        super::have_tools(test, &[MOSQUITTO], "mosquitto");
    }
    found
}

/// A running mosquitto, killed when dropped.
pub struct Mosquitto {
    child: Child,
    pub port: u16,
}

impl Mosquitto {
    /// Runs mosquitto on `config`, written into `dir` as `mosquitto.conf`,
    /// and waits until `port` and every other `listener` the configuration
    /// names accept. The directory is opened to the `mosquitto` user, which the
    /// broker drops to when started as root.
    pub fn start(dir: &Path, config: &str, port: u16) -> Mosquitto {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = dir.join("mosquitto.conf");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(MOSQUITTO)
            .arg("-c")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto");
        let mut mosquitto = Mosquitto { child, port };
        let listeners = config.lines().filter_map(|line| {
            line.strip_prefix("listener ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        });
        // `listener 0 PATH` is a Unix socket, not a port.
        let listeners = listeners.filter(|&listening: &u16| listening != 0);
        let deadline = Instant::now() + WAIT;
        for listening in std::iter::once(port).chain(listeners) {
            while TcpStream::connect(("127.0.0.1", listening)).is_err() {
                if let Ok(Some(status)) = mosquitto.child.try_wait() {
                    panic!("mosquitto exited ({status}) on:\n{config}");
                }
                assert!(
                    Instant::now() < deadline,
                    "mosquitto did not listen on {listening}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        mosquitto
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGTERM, so that it saves what it persists, and the wait for it.
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
