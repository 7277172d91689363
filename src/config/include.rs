//! The list form of `channels:` and of `broker.storage.providers`: a list
//! whose entries are each a group, either a file named by `!include` or
//! entries written in place.
//!
//! Only those two lists read `!include`; this is not a preprocessor. The
//! rules the list keeps:
//!
//! - a path resolves against the directory of the configuration file,
//!   never the directory the broker was started from, and text not read
//!   from a file has no directory, so includes nothing;
//! - an included file holds entries by name and nothing else, and names no
//!   other file;
//! - a name defined twice, in one file or two, is refused naming both;
//! - a path is a path, never a pattern: `*`, `?` and `[` are refused.
//!
//! Findings about what an included file says name that file first, since
//! the report's head names only the configuration file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::findings::{join, show, syntax_finding, Findings};
use super::table::is_include;

/// Where the configuration came from.
pub(super) struct Origin<'a> {
    /// The configuration's name, as the report's head gives it.
    pub(super) source: &'a str,
    /// The directory `!include` paths resolve against: that of the
    /// configuration file. `None` for text not read from a file.
    pub(super) base: Option<&'a Path>,
}

impl Origin<'_> {
    /// The name of the file an entry is written in: the included file, or
    /// the configuration file for `None`.
    pub(super) fn file_of<'s>(&'s self, file: Option<&'s str>) -> &'s str {
        file.unwrap_or(self.source)
    }
}

/// What a list holds, for its findings.
pub(super) struct Listed {
    /// `channel` or `provider`.
    pub(super) noun: &'static str,
    /// One entry as written in place, such as `events: {type: append}`.
    pub(super) example: &'static str,
    /// A path as an `!include` would name it.
    pub(super) file_example: &'static str,
}

/// One entry of the block, and the file it is written in.
pub(super) struct Entry {
    /// The included file, as resolved; `None` for the configuration file.
    pub(super) file: Option<String>,
    pub(super) key: Value,
    pub(super) value: Value,
}

/// The entries of a block written as one mapping, all in the
/// configuration file.
pub(super) fn in_place(mapping: &Mapping) -> Vec<Entry> {
    mapping
        .iter()
        .map(|(key, value)| Entry {
            file: None,
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// The entries of the list form at `path`, in the order written, and
/// whether every group could be read. A name defined a second time is
/// reported, naming both files, and left out.
pub(super) fn list(
    f: &mut Findings,
    path: &str,
    items: &[Value],
    origin: &Origin<'_>,
    listed: &Listed,
) -> (Vec<Entry>, bool) {
    let mut entries: Vec<Entry> = Vec::new();
    // Each name, by the entry defining it.
    let mut defined: HashMap<Value, usize> = HashMap::new();
    let mut included: Vec<(PathBuf, usize)> = Vec::new();
    let mut ok = true;
    for (index, item) in items.iter().enumerate() {
        let here = format!("{path} (entry {})", index + 1);
        let group = match item {
            // Every line of the group commented out: an empty group, as an
            // emptied block of keys is anywhere else.
            Value::Null => continue,
            Value::Mapping(m) => Some((None, m.clone())),
            Value::Tagged(t) if is_include(item) => {
                let at = Included {
                    path,
                    here: &here,
                    number: index + 1,
                };
                include(f, &at, &t.value, origin, listed, &mut included)
            }
            Value::Tagged(t) => {
                f.value(
                    &here,
                    item,
                    format!(
                        "{} is not a tag Sagüin reads; {}",
                        t.tag,
                        entry_forms(listed)
                    ),
                );
                None
            }
            other => {
                f.value(&here, other, entry_forms(listed));
                None
            }
        };
        let Some((file, mapping)) = group else {
            ok = false;
            continue;
        };
        for (key, value) in mapping {
            if let Some(&earlier) = defined.get(&key) {
                let earlier = &entries[earlier];
                let name = match &key {
                    Value::String(s) => s.clone(),
                    other => show(other),
                };
                let first = origin.file_of(earlier.file.as_deref());
                let again = origin.file_of(file.as_deref());
                let twice = if first == again {
                    format!("defined twice in {first}, in two groups of the list")
                } else {
                    format!("defined in {first} and again in {again}")
                };
                f.within(file.as_deref(), |f| {
                    f.key(
                        &join(path, &name),
                        format!(
                            "the {} {name} is {twice}; a name is defined once, since otherwise the order of the list would decide which definition is in force; rename or remove one",
                            listed.noun
                        ),
                    )
                });
                ok = false;
                continue;
            }
            defined.insert(key.clone(), entries.len());
            entries.push(Entry {
                file: file.clone(),
                key,
                value,
            });
        }
    }
    (entries, ok)
}

/// Where an `!include` is written.
struct Included<'a> {
    /// The list's path, such as `channels`.
    path: &'a str,
    /// The entry's, such as `channels (entry 2)`.
    here: &'a str,
    /// The entry's number, from 1.
    number: usize,
}

/// Reads the file an `!include` names: its name as resolved, and its
/// entries.
fn include(
    f: &mut Findings,
    at: &Included<'_>,
    value: &Value,
    origin: &Origin<'_>,
    listed: &Listed,
    included: &mut Vec<(PathBuf, usize)>,
) -> Option<(Option<String>, Mapping)> {
    let here = at.here;
    let Value::String(written) = value else {
        f.value(
            here,
            value,
            format!(
                "!include takes the path of one file, written as text, such as - !include {}",
                listed.file_example
            ),
        );
        return None;
    };
    if written.trim().is_empty() {
        f.value(
            here,
            value,
            format!(
                "!include names a file, and this path is empty; write one, such as - !include {}",
                listed.file_example
            ),
        );
        return None;
    }
    if written.contains(['*', '?', '[']) {
        f.value(
            here,
            value,
            "a path is not a pattern: *, ? and [ are not expanded, because what the broker serves would then depend on a directory listing, and an editor's backup file would become configuration; name each file in an entry of its own",
        );
        return None;
    }
    let Some(base) = origin.base else {
        f.value(
            here,
            value,
            format!(
                "{} is not read from a file, so there is no directory to find the path in; !include can be used only in a configuration file given to the broker, where it resolves against that file's directory",
                origin.source
            ),
        );
        return None;
    };
    let resolved = base.join(written);
    let file = resolved.display().to_string();
    let text = match std::fs::read_to_string(&resolved) {
        Ok(text) => text,
        Err(e) => {
            f.value(here, value, format!("the file {file} cannot be read: {e}"));
            return None;
        }
    };
    // One file named twice would define each of its names twice; say so
    // once. The file was just read, so it can be resolved.
    let same = std::fs::canonicalize(&resolved).unwrap_or_else(|_| resolved.clone());
    if let Some((_, number)) = included.iter().find(|(p, _)| *p == same) {
        f.value(
            here,
            value,
            format!("{file} is included by entry {number} already; name each file once"),
        );
        return None;
    }
    included.push((same, at.number));
    let mut doc: Value = match serde_yaml::from_str(&text) {
        Ok(doc) => doc,
        Err(e) => {
            f.within(Some(&file), |f| f.whole(syntax_finding(&e)));
            return None;
        }
    };
    if let Err(e) = doc.apply_merge() {
        f.within(Some(&file), |f| {
            f.whole(format!("the YAML merge key `<<` cannot be applied: {e}"))
        });
        return None;
    }
    if holds_include(&doc) {
        f.within(Some(&file), |f| {
            f.key(
                at.path,
                format!(
                    "this file is named by !include in {source}, so it names no file itself, and it holds an !include; an included file holds {noun}s and nothing else, so name every file from {source} instead",
                    source = origin.source,
                    noun = listed.noun,
                ),
            )
        });
        return None;
    }
    match doc {
        Value::Mapping(m) => Some((Some(file), m)),
        Value::Null => Some((Some(file), Mapping::new())),
        other => {
            f.within(Some(&file), |f| {
                f.value(
                    at.path,
                    &other,
                    format!(
                        "an included file holds {noun}s, each under its name, and nothing else, such as {example}",
                        noun = listed.noun,
                        example = listed.example,
                    ),
                )
            });
            None
        }
    }
}

/// Whether an `!include` is written anywhere in `value`.
fn holds_include(value: &Value) -> bool {
    match value {
        Value::Tagged(t) => is_include(value) || holds_include(&t.value),
        Value::Sequence(items) => items.iter().any(holds_include),
        Value::Mapping(m) => m.iter().any(|(k, v)| holds_include(k) || holds_include(v)),
        _ => false,
    }
}

fn entry_forms(listed: &Listed) -> String {
    format!(
        "an entry of the list is !include with the path of a file of {noun}s, such as - !include {file}, or {noun}s written in place, each under its name, such as - {example}",
        noun = listed.noun,
        file = listed.file_example,
        example = listed.example,
    )
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_contains;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::config::{declared_memory_bytes, load, parse, Config, ConfigError, ProviderKind};

    /// A directory of its own under the system's temporary directory,
    /// removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(test: &str) -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("saguin-include-{test}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        /// Writes `text` at `name` under the directory, making its parents.
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }

        /// How findings name a file under the directory.
        fn shown(&self, name: &str) -> String {
            self.0.join(name).display().to_string()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const STORAGE: &str = "broker:
  id: t
  storage:
    default: local
    default_retention_period: 3d
    default_retention_bytes: none
    providers:
      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
";

    /// A configuration with one provider, `local`, and `list` under
    /// `channels:`.
    fn with_channels(list: &str) -> String {
        format!("{STORAGE}channels:\n{list}")
    }

    fn ok(path: &Path) -> Config {
        match load(path) {
            Ok(c) => c,
            Err(e) => panic!("expected a valid configuration, got:\n{e}"),
        }
    }

    fn refused(path: &Path) -> ConfigError {
        match load(path) {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => e,
        }
    }

    fn only(path: &Path) -> String {
        let e = refused(path);
        assert_eq!(e.findings.len(), 1, "{:#?}", e.findings);
        e.findings[0].clone()
    }

    #[test]
    fn channels_and_providers_are_read_from_includes_and_groups_in_place() {
        let dir = Dir::new("read");
        dir.write(
            "storage/vessel.yaml",
            "vessel-07:\n  type: redb\n  file_path: /var/lib/saguin/vessel-07.redb\n  max_bytes: 64MiB\n",
        );
        dir.write(
            "channels/telemetry.yaml",
            "# readings, by the telemetry team\nreadings:\n  type: append\n  storage: vessel-07\n  retention_period: 7d\njobs:\n  type: append\n",
        );
        let master = dir.write(
            "saguin.yaml",
            "broker:
  id: t
  storage:
    default: local
    default_retention_period: 3d
    default_retention_bytes: none
    providers:
      - !include storage/vessel.yaml
      - local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
        scratch: {type: memory, max_bytes: 16MiB, snapshot_dir: /var/lib/saguin/snap}
channels:
  - !include channels/telemetry.yaml
  - events:
      type: append
      storage: scratch
",
        );
        let c = ok(&master);
        let storage = c.broker.storage.expect("a storage block");
        let names: Vec<&str> = storage.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["vessel-07", "local", "scratch"]);
        assert!(matches!(
            storage.provider("vessel-07").unwrap().kind,
            ProviderKind::Redb { .. }
        ));
        assert_eq!(declared_memory_bytes(&storage), 80 << 20);
        let channels: Vec<(&str, &str)> = c
            .channels
            .iter()
            .map(|c| (c.name.as_str(), c.storage.as_str()))
            .collect();
        assert_eq!(
            channels,
            [
                ("readings", "vessel-07"),
                ("jobs", "local"),
                ("events", "scratch")
            ]
        );
        assert_eq!(c.channels[0].retention_period_s, Some(7 * 86_400));
        assert_eq!(c.source, master.display().to_string());
    }

    #[test]
    fn a_path_resolves_against_the_including_file_not_the_working_directory() {
        let dir = Dir::new("relative");
        dir.write("etc/channels/a.yaml", "a:\n  type: append\n");
        dir.write("shared/b.yaml", "b:\n  type: append\n");
        let master = dir.write(
            "etc/saguin.yaml",
            &with_channels("  - !include channels/a.yaml\n  - !include ../shared/b.yaml\n"),
        );
        // The tests run in the crate's directory, where neither path is.
        assert!(!Path::new("channels/a.yaml").exists());
        let c = ok(&master);
        let names: Vec<&str> = c.channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        // An absolute path is taken as written.
        let absolute = dir.write(
            "elsewhere/saguin.yaml",
            &with_channels(&format!("  - !include {}\n", dir.shown("shared/b.yaml"))),
        );
        assert_eq!(ok(&absolute).channels[0].name, "b");
        // The same text with no file behind it has no directory.
        let text = std::fs::read_to_string(&master).unwrap();
        let e = parse(&text, crate::config::EMBEDDED_SOURCE).unwrap_err();
        assert_eq!(e.findings.len(), 2, "{:#?}", e.findings);
        assert_contains(
            &e.findings[0],
            &[
                "channels (entry 1) \"channels/a.yaml\"",
                "<embedded default> is not read from a file",
            ],
        );
        // parse_with_base resolves against the directory it is given.
        let base = dir.0.join("etc");
        let c = crate::config::parse_with_base(&text, "saguin.yaml", Some(&base)).unwrap();
        assert_eq!(c.channels.len(), 2);
    }

    #[test]
    fn an_included_file_that_includes_is_refused() {
        let dir = Dir::new("nested");
        dir.write("inner.yaml", "x:\n  type: append\n");
        dir.write("outer.yaml", "- !include inner.yaml\n");
        dir.write(
            "deep.yaml",
            "y:\n  type: append\n  filter: !include inner.yaml\n",
        );
        let master = dir.write(
            "saguin.yaml",
            &with_channels("  - !include outer.yaml\n  - !include deep.yaml\n"),
        );
        let e = refused(&master);
        assert_eq!(e.findings.len(), 2, "{:#?}", e.findings);
        let source = master.display().to_string();
        for (finding, file) in e.findings.iter().zip(["outer.yaml", "deep.yaml"]) {
            assert_contains(
                finding,
                &[
                    &format!("{}: channels:", dir.shown(file)),
                    &format!("named by !include in {source}"),
                    "name every file from",
                ],
            );
        }
        // The configuration file included from the list includes too.
        let f = only(&dir.write("self.yaml", &with_channels("  - !include self.yaml\n")));
        assert_contains(&f, &[&dir.shown("self.yaml"), "holds an !include"]);
    }

    #[test]
    fn a_channel_defined_in_two_files_is_refused_naming_both() {
        let dir = Dir::new("twice");
        dir.write("a.yaml", "events:\n  type: append\n  filter: a/#\n");
        dir.write(
            "b.yaml",
            "other:\n  type: append\nevents:\n  type: append\n  filter: b/#\n",
        );
        let master = dir.write(
            "saguin.yaml",
            &with_channels("  - !include a.yaml\n  - !include b.yaml\n"),
        );
        let f = only(&master);
        assert_contains(
            &f,
            &[
                &format!("{}: channels.events:", dir.shown("b.yaml")),
                &format!(
                    "the channel events is defined in {} and again in {}",
                    dir.shown("a.yaml"),
                    dir.shown("b.yaml")
                ),
            ],
        );
        // Against a group written in place, the configuration file is named.
        let master = dir.write(
            "saguin.yaml",
            &with_channels("  - events:\n      type: append\n  - !include a.yaml\n"),
        );
        let f = only(&master);
        assert_contains(
            &f,
            &[&format!(
                "defined in {} and again in {}",
                master.display(),
                dir.shown("a.yaml")
            )],
        );
    }

    #[test]
    fn one_filter_carried_from_two_files_is_refused_naming_both() {
        let dir = Dir::new("filter");
        dir.write(
            "a.yaml",
            "alarms:\n  type: append\n  filter: site/{x,y}/#\n",
        );
        dir.write("b.yaml", "faults:\n  type: append\n  filter: site/y/#\n");
        let master = dir.write(
            "saguin.yaml",
            &with_channels("  - !include a.yaml\n  - !include b.yaml\n"),
        );
        let f = only(&master);
        assert_contains(
            &f,
            &[
                &format!(
                    "{}: channels.faults.filter \"site/y/#\"",
                    dir.shown("b.yaml")
                ),
                "carried by channel alarms as well",
                &format!(
                    "defined in {} while this channel is in {}",
                    dir.shown("a.yaml"),
                    dir.shown("b.yaml")
                ),
            ],
        );
        // A channel in place clashing with one included: the configuration
        // file is named for it.
        let master = dir.write(
            "saguin.yaml",
            &with_channels(
                "  - !include a.yaml\n  - mine:\n      type: append\n      filter: site/x/#\n",
            ),
        );
        let f = only(&master);
        assert_contains(
            &f,
            &[
                "channels.mine.filter",
                &format!("while this channel is in {}", master.display()),
            ],
        );
        assert!(!f.starts_with(&dir.shown("")), "{f}");
    }

    #[test]
    fn a_pattern_is_refused() {
        let dir = Dir::new("glob");
        dir.write("channels/a.yaml", "a:\n  type: append\n");
        for pattern in ["channels/*.yaml", "channels/?.yaml", "channels/[ab].yaml"] {
            let master = dir.write(
                "saguin.yaml",
                &with_channels(&format!("  - !include \"{pattern}\"\n")),
            );
            let f = only(&master);
            assert_contains(
                &f,
                &[
                    &format!("channels (entry 1) \"{pattern}\""),
                    "a path is not a pattern",
                    "name each file",
                ],
            );
        }
    }

    #[test]
    fn a_missing_file_is_named_with_the_os_error() {
        let dir = Dir::new("missing");
        let master = dir.write(
            "saguin.yaml",
            &with_channels("  - !include channels/gone.yaml\n"),
        );
        let f = only(&master);
        assert_contains(
            &f,
            &[
                "channels (entry 1) \"channels/gone.yaml\"",
                &format!(
                    "the file {} cannot be read",
                    dir.shown("channels/gone.yaml")
                ),
                "No such file",
            ],
        );
        // A provider file too, beside the other findings.
        let master = dir.write(
            "saguin.yaml",
            &STORAGE.replace(
                "      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}\n",
                "      - !include storage/gone.yaml\n",
            ),
        );
        let e = refused(&master);
        assert_contains(
            &e.findings[0],
            &[
                "broker.storage.providers (entry 1) \"storage/gone.yaml\"",
                &dir.shown("storage/gone.yaml"),
                "No such file",
            ],
        );
    }

    #[test]
    fn an_unknown_key_in_an_included_file_names_that_file() {
        let dir = Dir::new("unknown");
        dir.write(
            "channels/t.yaml",
            "readings:\n  type: append\n  retention_perod: 7d\n",
        );
        dir.write(
            "storage/s.yaml",
            "disk:\n  type: redb\n  file_path: /var/lib/d.redb\n  max_byte: 1MiB\n",
        );
        let master = dir.write(
            "saguin.yaml",
            &format!(
                "{}channels:\n  - !include channels/t.yaml\n",
                STORAGE.replace(
                    "      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}\n",
                    "      - !include storage/s.yaml\n      - local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}\n",
                )
            ),
        );
        let e = refused(&master);
        assert_eq!(e.file, master.display().to_string());
        assert_eq!(e.findings.len(), 3, "{:#?}", e.findings);
        assert_contains(
            &e.findings[0],
            &[
                &format!(
                    "{}: broker.storage.providers.disk.max_byte:",
                    dir.shown("storage/s.yaml")
                ),
                "did you mean max_bytes?",
            ],
        );
        assert_contains(
            &e.findings[1],
            &[&format!(
                "{}: broker.storage.providers.disk.max_bytes: missing",
                dir.shown("storage/s.yaml")
            )],
        );
        assert_contains(
            &e.findings[2],
            &[
                &format!(
                    "{}: channels.readings.retention_perod:",
                    dir.shown("channels/t.yaml")
                ),
                "did you mean retention_period?",
            ],
        );
    }

    #[test]
    fn two_providers_on_one_store_in_two_files_are_refused_naming_both() {
        let dir = Dir::new("store");
        dir.write(
            "storage/a.yaml",
            "alpha:\n  type: redb\n  file_path: /var/lib/saguin/x.redb\n  max_bytes: 64MiB\n",
        );
        dir.write(
            "storage/b.yaml",
            "beta:\n  type: redb\n  file_path: /var/lib//saguin/../saguin/./x.redb\n  max_bytes: 64MiB\n",
        );
        dir.write(
            "storage/c.yaml",
            "alpha:\n  type: memory\n  max_bytes: 64MiB\n  snapshot_dir: none\n",
        );
        let providers = |list: &str| {
            dir.write(
                "saguin.yaml",
                &STORAGE.replace("default: local", "default: alpha").replace(
                    "      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}\n",
                    list,
                ),
            )
        };
        let f = only(&providers(
            "      - !include storage/a.yaml\n      - !include storage/b.yaml\n",
        ));
        assert_contains(
            &f,
            &[
                &format!(
                    "{}: broker.storage.providers.beta:",
                    dir.shown("storage/b.yaml")
                ),
                "/var/lib//saguin/../saguin/./x.redb",
                "where provider alpha keeps its own (/var/lib/saguin/x.redb)",
                &format!(
                    "provider alpha is defined in {}, and beta in {}",
                    dir.shown("storage/a.yaml"),
                    dir.shown("storage/b.yaml")
                ),
            ],
        );
        // One provider name in two files.
        let f = only(&providers(
            "      - !include storage/a.yaml\n      - !include storage/c.yaml\n",
        ));
        assert_contains(
            &f,
            &[
                &format!(
                    "{}: broker.storage.providers.alpha:",
                    dir.shown("storage/c.yaml")
                ),
                &format!(
                    "the provider alpha is defined in {} and again in {}",
                    dir.shown("storage/a.yaml"),
                    dir.shown("storage/c.yaml")
                ),
            ],
        );
    }

    #[test]
    fn an_included_file_holds_a_block_of_valid_yaml_and_is_named_once() {
        let dir = Dir::new("shape");
        dir.write("list.yaml", "- a:\n    type: append\n");
        dir.write("broken.yaml", "a:\n  type: [append\n");
        dir.write("empty.yaml", "# nothing yet\n");
        dir.write("a.yaml", "a:\n  type: append\n");
        let f = only(&dir.write("saguin.yaml", &with_channels("  - !include list.yaml\n")));
        assert_contains(
            &f,
            &[
                &format!("{}: channels (a list):", dir.shown("list.yaml")),
                "holds channels, each under its name, and nothing else",
            ],
        );
        let f = only(&dir.write("saguin.yaml", &with_channels("  - !include broken.yaml\n")));
        assert_contains(
            &f,
            &[&format!(
                "{}: line 3, column 1: not valid YAML",
                dir.shown("broken.yaml")
            )],
        );
        let c = ok(&dir.write("saguin.yaml", &with_channels("  - !include empty.yaml\n")));
        assert!(c.channels.is_empty());
        let f = only(&dir.write(
            "saguin.yaml",
            &with_channels("  - !include a.yaml\n  - !include ./a.yaml\n"),
        ));
        assert_contains(
            &f,
            &[
                "channels (entry 2) \"./a.yaml\"",
                "is included by entry 1 already",
            ],
        );
        let f = only(&dir.write("saguin.yaml", &with_channels("  - !include 7\n")));
        assert_contains(&f, &["channels (entry 1) 7", "written as text"]);
    }
}
