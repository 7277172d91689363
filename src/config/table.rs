//! Reading a mapping of keys: only the keys a block takes are kept, every
//! other key is a finding, with a "did you mean" for a near miss.

use serde_yaml::Value;

use super::findings::{join, show, Findings};

/// Which keys a mapping may hold.
pub(super) struct Keys {
    /// Keys this version reads.
    pub(super) supported: &'static [&'static str],
    /// Keys of the full configuration that this version does not implement.
    pub(super) not_yet: &'static [&'static str],
}

/// A mapping whose keys have been checked: only supported keys remain.
pub(super) struct Table<'a> {
    entries: Vec<(&'a str, &'a Value)>,
}

impl<'a> Table<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }
}

/// Reads `value` as a mapping with the given keys, reporting every other
/// key. An empty value (every child commented out) reads as an empty
/// mapping. Returns `None`, with a finding, when the value is not a
/// mapping at all.
pub(super) fn table<'a>(
    f: &mut Findings,
    path: &str,
    value: &'a Value,
    keys: &Keys,
) -> Option<Table<'a>> {
    let mapping = match value {
        Value::Null => {
            return Some(Table {
                entries: Vec::new(),
            })
        }
        Value::Mapping(m) => m,
        other => {
            let here = if path.is_empty() { "the file" } else { path };
            if is_include(other) {
                f.value(here, other, MISPLACED_INCLUDE);
            } else {
                f.value(
                    here,
                    other,
                    format!(
                        "a block of keys is expected here ({})",
                        keys.supported.join(", ")
                    ),
                );
            }
            return None;
        }
    };
    let mut entries = Vec::new();
    for (k, v) in mapping {
        let Value::String(name) = k else {
            f.key(
                &join(path, &show(k)),
                "a key is a name written as text; this one is not",
            );
            continue;
        };
        let here = join(path, name);
        if keys.supported.contains(&name.as_str()) {
            entries.push((name.as_str(), v));
        } else if keys.not_yet.contains(&name.as_str()) {
            f.key(
                &here,
                "recognised, but not supported by this version of Sagüin yet, so nothing it says would be in force; remove it",
            );
        } else {
            f.key(&here, unknown_key(name, keys));
        }
    }
    Some(Table { entries })
}

/// Why an `!include` written anywhere but in the two lists is refused.
const MISPLACED_INCLUDE: &str = "!include is read only as an entry of the list form of channels or of broker.storage.providers, such as channels: [!include channels/telemetry.yaml]; write the block here in place";

/// Whether `value` is tagged `!include`.
pub(super) fn is_include(value: &Value) -> bool {
    matches!(value, Value::Tagged(t) if t.tag == "include")
}

fn unknown_key(name: &str, keys: &Keys) -> String {
    let near = keys
        .supported
        .iter()
        .chain(keys.not_yet)
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min();
    let listed = if keys.supported.is_empty() {
        "this block takes no keys in this version".to_string()
    } else {
        format!("the keys here are {}", keys.supported.join(", "))
    };
    match near {
        Some((_, k)) => format!("not a key Sagüin takes here; did you mean {k}? ({listed})"),
        None => format!("not a key Sagüin takes here; {listed}"),
    }
}

/// Levenshtein distance, for "did you mean" hints on short key names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            let cost = usize::from(ca != *cb);
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + cost);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("max_conections", "max_connections"), 1);
        assert_eq!(edit_distance("loglevel", "log_level"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
