//! `POST /v1/operations/backup?dir=DIR`: an online backup of every redb
//! provider into a directory on the broker's machine, answered once every
//! copy is verified (RFC 0013). The one route that writes: it takes `POST`
//! only, writes only new files whose names the broker chooses, and waits
//! on the storage threads, never on the executor.

use std::path::Path;

use super::http::{Request, Response};
use super::json::string;
use crate::store::{BackupReport, Backups, StoreError};

/// The route, as a password file's scope names it.
pub const ROUTE: &str = "/v1/operations/backup";

/// `YYYYmmddTHHMMSSmmmZ`: sorts as it reads, and two backups a
/// millisecond apart still get files of their own.
fn stamp(unix_ms: u64) -> String {
    let seconds: String = super::json::timestamp(Some(unix_ms))
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let bare = seconds.trim_end_matches('Z');
    format!("{bare}{:03}Z", unix_ms % 1000)
}

fn row(provider: &str, file: &Path, result: &Result<BackupReport, StoreError>) -> String {
    let head = format!(
        "\"provider\":{},\"file\":{}",
        string(provider),
        string(&file.display().to_string())
    );
    match result {
        Ok(r) => format!(
            "{{{head},\"verified\":true,\"channels\":{},\"records\":{},\"rows\":{},\"file_bytes\":{},\"took_ms\":{}}}",
            r.channels, r.records, r.rows, r.file_bytes, r.took_ms
        ),
        Err(e) => format!("{{{head},\"verified\":false,\"error\":{}}}", string(&e.to_string())),
    }
}

/// Starts a backup of every redb provider into `?dir=` and waits for each.
pub async fn backup(backups: &Backups, request: &Request, now_unix_ms: u64) -> Response {
    let dirs = request.query_values("dir");
    let [dir] = dirs.as_slice() else {
        return Response::text(
            400,
            "name the directory to write into once: ?dir=/absolute/path\n",
        );
    };
    let path = Path::new(dir);
    if !path.is_absolute() || !path.is_dir() {
        return Response::text(
            400,
            format!("{dir} is not an absolute path to a directory on the broker's machine; create it, writable by the broker's user\n"),
        );
    }
    if backups.names().next().is_none() {
        return Response::text(
            409,
            "no provider to back up online: a memory provider's copy is its snapshot directory after a graceful stop\n",
        );
    }
    let mut answers = Vec::new();
    let started = backups.start_all(path, &stamp(now_unix_ms), |_| {
        let (tx, rx) = smol::channel::bounded(1);
        answers.push(rx);
        Box::new(move |result| {
            let _ = tx.try_send(result);
        })
    });
    let mut rows = Vec::new();
    let mut verified = true;
    for ((provider, file), answer) in started.iter().zip(answers) {
        let result = answer.recv().await.unwrap_or(Err(StoreError::Stopped));
        verified &= result.is_ok();
        rows.push(row(provider, file, &result));
    }
    let status = if verified { 200 } else { 500 };
    Response::json(status, format!("{{\"backups\":[{}]}}\n", rows.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_the_utc_time_to_the_millisecond() {
        assert_eq!(stamp(1_796_122_477_123), "20261201T105437123Z");
        assert_eq!(stamp(0), "19700101T000000000Z");
    }
}
