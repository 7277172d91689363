//! mosquitto.conf read as mosquitto reads it: one option a line, its name
//! and then its value, `#` lines and blank lines skipped, and the files an
//! `include_dir` names read in mosquitto's order where it stands.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use super::Failure;

/// One option as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The file it is in, as named to the tool or found by `include_dir`.
    pub file: PathBuf,
    /// 1-based.
    pub number: usize,
    /// The option's name.
    pub key: String,
    /// Its value's words.
    pub args: Vec<String>,
}

impl Line {
    /// The value as one string: the words after the name, joined by one
    /// space.
    pub fn value(&self) -> String {
        self.args.join(" ")
    }

    /// `file, line N: why`, for a line the migration cannot carry.
    pub fn fail(&self, why: impl Into<String>) -> Failure {
        Failure::at(&self.file, Some(self.number), why)
    }
}

/// Every option of `main` and of the files its `include_dir` lines name,
/// in the order mosquitto applies them. A relative `include_dir` is read
/// against `main`'s directory.
pub fn read(main: &Path) -> Result<Vec<Line>, Failure> {
    let mut lines = Vec::new();
    for line in read_one(main)? {
        if line.key != "include_dir" {
            lines.push(line);
            continue;
        }
        let Some(dir) = line.args.first().filter(|_| line.args.len() == 1) else {
            return Err(line.fail("include_dir takes one directory"));
        };
        let dir = main.parent().unwrap_or(Path::new(".")).join(dir);
        for file in included(&dir).map_err(|why| line.fail(why))? {
            if file.canonicalize().ok() == main.canonicalize().ok() {
                return Err(line.fail(format!(
                    "{} holds the main configuration itself, which mosquitto refuses; move one of them",
                    dir.display()
                )));
            }
            // An included file's own include_dir is read as an option and
            // reported, as mosquitto reads one only from the main file.
            lines.extend(read_one(&file)?);
        }
        // The directory itself is an option met, and reported.
        lines.push(line);
    }
    Ok(lines)
}

fn read_one(path: &Path) -> Result<Vec<Line>, Failure> {
    Ok(parse(path, &super::read_text(path, "the configuration")?))
}

/// The options of `text`, read as the file `path`.
pub fn parse(path: &Path, text: &str) -> Vec<Line> {
    text.lines()
        .enumerate()
        .filter_map(|(index, raw)| {
            let mut words = raw.split_whitespace();
            let key = words.next().filter(|k| !k.starts_with('#'))?;
            Some(Line {
                file: path.to_path_buf(),
                number: index + 1,
                key: key.to_string(),
                args: words.map(str::to_string).collect(),
            })
        })
        .collect()
}

/// The `.conf` files in `dir`, in mosquitto's order.
fn included(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("include_dir {} cannot be read: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "conf") && path.is_file())
        .collect();
    files.sort_by(|a, b| mosquitto_order(&a.to_string_lossy(), &b.to_string_lossy()));
    Ok(files)
}

/// mosquitto's order for included files: alphabetical by letter, the upper
/// case of a letter before its lower case (`A.conf`, `a.conf`, `B.conf`).
fn mosquitto_order(a: &str, b: &str) -> Ordering {
    let key = |c: char| (c.to_ascii_lowercase(), c.is_ascii_lowercase());
    a.chars().map(key).cmp(b.chars().map(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_comments_and_blank_lines() {
        let text = "# a comment\n\npersistence true\n  listener 1883 127.0.0.1\n#listener 1\nlog_dest file /var/log/m.log\r\n";
        let lines = parse(Path::new("/etc/m.conf"), text);
        let read: Vec<(usize, &str, String)> = lines
            .iter()
            .map(|l| (l.number, l.key.as_str(), l.value()))
            .collect();
        assert_eq!(
            read,
            [
                (3, "persistence", "true".to_string()),
                (4, "listener", "1883 127.0.0.1".to_string()),
                (6, "log_dest", "file /var/log/m.log".to_string()),
            ]
        );
    }

    #[test]
    fn included_files_come_in_mosquittos_order() {
        let mut names = vec!["b.conf", "A.conf", "01.conf", "a.conf", "B.conf", "00.conf"];
        names.sort_by(|a, b| mosquitto_order(a, b));
        assert_eq!(
            names,
            ["00.conf", "01.conf", "A.conf", "a.conf", "B.conf", "b.conf"]
        );
    }
}
