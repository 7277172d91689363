//! Certificates for the tests, made with `openssl`: an authority, and
//! what it signs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// An authority and what it signed, as `openssl` makes them.
pub struct Authority {
    dir: PathBuf,
    name: String,
}

impl Authority {
    pub fn new(dir: &Path, name: &str) -> Authority {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-days",
                "30",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}-key.pem"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
        Authority {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }
    }

    pub fn pem(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// Signs a new key pair for `subject`, carrying `extension` if any,
    /// valid for `days` (negative: already expired). Returns the
    /// certificate and key files, named `file`. Without an extension,
    /// openssl 3.0 issues an X.509 version 1 certificate.
    pub fn issue(
        &self,
        file: &str,
        subject: &str,
        extension: Option<&str>,
        days: i32,
    ) -> (PathBuf, PathBuf) {
        let key = format!("{file}-key.pem");
        let csr = format!("{file}.csr");
        let mut request = vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            &key,
            "-out",
            &csr,
        ];
        if let Some(extension) = extension {
            request.extend(["-addext", extension]);
        }
        openssl(&self.dir, &request);
        let ca = format!("{}.pem", self.name);
        let ca_key = format!("{}-key.pem", self.name);
        let cert = format!("{file}.pem");
        let days = days.to_string();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                &days,
                "-copy_extensions",
                "copy",
                "-out",
                &cert,
            ],
        );
        (self.dir.join(cert), self.dir.join(key))
    }

    /// A certificate for the broker at 127.0.0.1.
    pub fn server(&self, file: &str) -> (PathBuf, PathBuf) {
        self.issue(
            file,
            "/CN=broker",
            Some("subjectAltName=DNS:localhost,IP:127.0.0.1"),
            30,
        )
    }
}

pub fn openssl(dir: &Path, args: &[&str]) {
    super::output_of(
        Command::new("openssl").args(args).current_dir(dir),
        "apt-get install openssl",
    );
}
