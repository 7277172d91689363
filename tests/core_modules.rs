//! The shape of `src/core`, read from its source as text: which of the
//! core's top-level modules names which, so that no two of them depend on
//! each other, and that only the broker's own files extend the `Broker`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CORE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/core");

struct Source {
    /// Relative to `src/core`, with `/` separators.
    relative: String,
    /// The module path inside `core`: `channel/latest/reader.rs` is
    /// `["channel", "latest", "reader"]`, `channel/mod.rs` is `["channel"]`.
    module: Vec<String>,
    text: String,
}

fn sources() -> Vec<Source> {
    let mut files = Vec::new();
    collect(Path::new(CORE), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(CORE)
                .expect("under src/core")
                .to_string_lossy()
                .replace('\\', "/");
            let mut module: Vec<String> = relative
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_string)
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("readable source");
            Source {
                relative,
                module,
                text,
            }
        })
        .collect()
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The code of a line, without its comment: doc links name paths that
/// are no dependency.
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first identifier of each item of a `{a, b::c, d as e}` group, or
/// the one identifier at `rest`'s start.
fn leading_names(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let mut names = Vec::new();
        let mut depth = 0;
        let mut at_item_start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => at_item_start = true,
                c if at_item_start && is_ident(c) && depth == 0 => {
                    let name: String = group[i..].chars().take_while(|&c| is_ident(c)).collect();
                    names.push(name);
                    at_item_start = false;
                }
                _ => {}
            }
        }
        names
    } else {
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        vec![name]
    }
}

/// Which top-level module each name the root imports or re-exports comes
/// from: a path through `crate::core::Refusal` depends on `refusal`.
fn root_imports(root: &str, tops: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let statements = root
        .split(';')
        .map(|s| s.lines().map(code).collect::<Vec<_>>().join(" "));
    for statement in statements {
        let statement = statement.trim();
        let Some(path) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("use "))
        else {
            continue;
        };
        let top: String = path.chars().take_while(|&c| is_ident(c)).collect();
        if !tops.contains(&top) {
            continue;
        }
        let last = match path.rfind("::{") {
            Some(at) => leading_names(&path[at + 2..]),
            None => vec![path.rsplit("::").next().unwrap_or_default().to_string()],
        };
        for name in last {
            let name = match path.find(" as ") {
                Some(at) if !path.contains('{') => path[at + 4..].trim().to_string(),
                _ => name,
            };
            names.insert(name, top.clone());
        }
    }
    names
}

/// The top-level modules `source` names, other than its own.
fn dependencies(
    source: &Source,
    tops: &BTreeSet<String>,
    reexported: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let own = &source.module[0];
    let mut found = BTreeSet::new();
    // Lines after an inline `mod tests {` sit one module deeper.
    let mut depth_extra = 0;
    let text: Vec<String> = source.text.lines().map(|l| code(l).to_string()).collect();
    let joined_from = |i: usize| text[i..].join(" ");
    for (i, line) in text.iter().enumerate() {
        if line.starts_with("mod ") && line.trim_end().ends_with('{') {
            depth_extra = 1;
        }
        let mut search = 0;
        while let Some(found_at) = next_path(line, search) {
            let (start, base_len, after) = found_at;
            search = after;
            let context_len = source.module.len() + depth_extra;
            let base: Vec<String> = match base_len {
                None => Vec::new(),
                Some(supers) => {
                    let mut context = source.module.clone();
                    context.extend(std::iter::repeat_n("_inline".to_string(), depth_extra));
                    if supers > context_len {
                        continue;
                    }
                    context.truncate(context_len - supers);
                    context
                }
            };
            let _ = start;
            let rest = joined_from(i);
            let rest = &rest[after..];
            let targets: Vec<String> = if base.is_empty() {
                leading_names(rest)
                    .into_iter()
                    .filter_map(|name| {
                        if tops.contains(&name) {
                            Some(name)
                        } else {
                            reexported.get(&name).cloned()
                        }
                    })
                    .collect()
            } else {
                vec![base[0].clone()]
            };
            for target in targets {
                if &target != own && !target.starts_with('_') {
                    found.insert(target);
                }
            }
        }
    }
    found
}

/// The next `crate::core::` or run of `super::` in `line` from `from`:
/// where it starts, how many `super`s (None for `crate::core`), and where
/// the path after it begins.
fn next_path(line: &str, from: usize) -> Option<(usize, Option<usize>, usize)> {
    let rest = &line[from..];
    let crate_at = rest.find("crate::core::");
    let super_at = rest.find("super::");
    let at = match (crate_at, super_at) {
        (Some(c), Some(s)) => c.min(s),
        (Some(c), None) => c,
        (None, Some(s)) => s,
        (None, None) => return None,
    };
    let start = from + at;
    if line[..start].ends_with(|c: char| is_ident(c) || c == ':') {
        // Part of a longer path, such as `saguin::core::`.
        return Some((start, Some(usize::MAX), start + 1));
    }
    if line[start..].starts_with("crate::core::") {
        return Some((start, None, start + "crate::core::".len()));
    }
    let mut end = start;
    let mut supers = 0;
    while line[end..].starts_with("super::") {
        end += "super::".len();
        supers += 1;
    }
    Some((start, Some(supers), end))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let sources = sources();
    let tops: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| s.module.first().cloned())
        .collect();
    let root = sources
        .iter()
        .find(|s| s.module.is_empty())
        .expect("src/core/mod.rs");
    let reexported = root_imports(&root.text, &tops);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources.iter().filter(|s| !s.module.is_empty()) {
        let edges = dependencies(source, &tops, &reexported);
        graph
            .entry(source.module[0].clone())
            .or_default()
            .extend(edges);
    }
    graph
}

/// Every module from which `from` is reached again.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = graph[start].iter().collect();
        while let Some(next) = stack.pop() {
            if next == start {
                found.push(start.clone());
                break;
            }
            if seen.insert(next) {
                stack.extend(graph.get(next).into_iter().flatten());
            }
        }
    }
    found
}

#[test]
fn no_module_of_the_core_imports_one_that_imports_it_back() {
    let graph = graph();
    let shape: Vec<String> = graph
        .iter()
        .map(|(from, to)| format!("{from} -> {to:?}"))
        .collect();
    // The reader sees the dependencies the code is known to have.
    for (from, to) in [
        ("broker", "session"),
        ("channel", "broadcast"),
        ("broadcast", "session"),
    ] {
        assert!(
            graph.get(from).is_some_and(|t| t.contains(to)),
            "{from} -> {to} not found:\n{}",
            shape.join("\n")
        );
    }
    if std::env::var_os("SHOW_CORE_MODULES").is_some() {
        eprintln!("{}", shape.join("\n"));
    }
    let cyclic = cycles(&graph);
    assert!(
        cyclic.is_empty(),
        "modules in an import cycle: {cyclic:?}\n{}",
        shape.join("\n")
    );
}

#[test]
fn the_reader_finds_the_edges_it_is_meant_to() {
    // The reader itself: a cycle written in each spelling is found.
    let tops: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let reexported = BTreeMap::from([("Thing".to_string(), "c".to_string())]);
    let file = |module: &[&str], text: &str| Source {
        relative: String::new(),
        module: module.iter().map(|s| s.to_string()).collect(),
        text: text.to_string(),
    };
    let deps = |s: &Source| dependencies(s, &tops, &reexported);
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(deps(&file(&["a"], "use super::b::X;")), names(&["b"]));
    assert_eq!(
        deps(&file(&["a", "inner"], "use super::super::b::X;")),
        names(&["b"])
    );
    assert_eq!(deps(&file(&["a", "inner"], "use super::X;")), names(&[]));
    assert_eq!(
        deps(&file(&["a"], "use crate::core::{b::X,\n    Thing};")),
        names(&["b", "c"])
    );
    assert_eq!(
        deps(&file(&["a"], "let x = crate::core::c::f(); // super::b::Y")),
        names(&["c"])
    );
    assert_eq!(
        deps(&file(
            &["a"],
            "mod tests {\n    use super::*;\n    use super::super::b::Z;\n}"
        )),
        names(&["b"])
    );
    let graph = BTreeMap::from([
        ("a".to_string(), names(&["b"])),
        ("b".to_string(), names(&["c"])),
        ("c".to_string(), names(&["a"])),
    ]);
    assert_eq!(cycles(&graph), vec!["a", "b", "c"]);
    let graph = BTreeMap::from([
        ("a".to_string(), names(&["b"])),
        ("b".to_string(), names(&[])),
    ]);
    assert!(cycles(&graph).is_empty());
}

#[test]
fn only_the_broker_extends_it() {
    let mut extending = Vec::new();
    for source in sources() {
        let in_broker = source.module.is_empty() || source.module[0] == "broker";
        let is_test = source.relative.ends_with("tests.rs");
        if in_broker || is_test {
            continue;
        }
        if source.text.contains("impl Broker {") {
            extending.push(source.relative);
        }
    }
    assert!(
        extending.is_empty(),
        "only src/core/broker/ and core/mod.rs extend the broker; a sub-machine's \
         behaviour belongs to a type of its own the broker calls: {extending:?}"
    );
}
