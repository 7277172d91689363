//! The layers point one way, read from the source as text: `codec`,
//! `store`, `core`, `ops` and `net` never import a layer above them (least of all
//! `config`, which builds their settings); the modules of `config`
//! import each other without a cycle, its reading helpers being leaves;
//! and so do the modules of `store`, the disk seam at their bottom.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each layer, and the crate modules it must never name.
const LAYERS: [(&str, &[&str]); 7] = [
    ("bridge", &["config", "net"]),
    ("codec", &["config", "net", "core", "store", "ops", "acl"]),
    ("acl", &["config", "net", "core", "store", "ops"]),
    ("store", &["config", "net", "core", "ops"]),
    ("core", &["config", "net", "ops"]),
    ("ops", &["config", "net"]),
    ("net", &["config"]),
];

/// The helpers every reading uses, and the only config modules each may
/// use in turn: they sit at the bottom of `config`.
const CONFIG_LEAVES: [(&str, &[&str]); 4] = [
    ("units", &[]),
    ("findings", &[]),
    ("table", &["findings"]),
    ("values", &["findings", "table", "units"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// The text with every `//` comment removed, line by line, so a doc link
/// or a sentence naming a module is not taken for an import. A `//` inside
/// a string literal cuts the rest of its line too, which can only hide a
/// name, never invent one.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text without its top-level `#[cfg(test)] mod name { ... }` blocks:
/// tests may reach anywhere. rustfmt closes a top-level block with a lone
/// `}` in the first column, which ends the cut.
fn without_test_module(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let opens_tests = line == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                let item = next.strip_prefix("pub(crate) ").unwrap_or(next);
                item.starts_with("mod ") && item.ends_with(" {")
            });
        if opens_tests {
            for inner in lines.by_ref() {
                if inner == "}" {
                    break;
                }
            }
            continue;
        }
        kept.push(line);
    }
    kept.join("\n")
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every whole identifier in `code` with its byte position.
fn identifiers(code: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut start = None;
    for (i, c) in code.char_indices() {
        match (start, is_ident_char(c)) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                found.push((s, &code[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        found.push((s, &code[s..]));
    }
    found
}

/// The `use` declarations of `code`, each from `use` to its `;`.
fn use_declarations(code: &str) -> Vec<&str> {
    identifiers(code)
        .into_iter()
        .filter(|(_, word)| *word == "use")
        .filter_map(|(at, _)| code[at..].find(';').map(|end| &code[at..at + end]))
        .collect()
}

/// Which of `modules` the code names as a crate module: `crate::m`,
/// `saguin::m`, `super::m` (from a layer's own folder, a sibling layer),
/// or `m` inside a `use` declaration.
fn crate_modules_named(code: &str, modules: &[&str]) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, word) in identifiers(code) {
        if !modules.contains(&word) {
            continue;
        }
        let before = code[..at].trim_end();
        let after = code[at + word.len()..].trim_start();
        let in_path = before.ends_with("crate::")
            || before.ends_with("saguin::")
            || before.ends_with("super::");
        if in_path && (after.starts_with("::") || after.starts_with(';') || after.starts_with(','))
        {
            named.insert(word.to_string());
        }
    }
    for declaration in use_declarations(code) {
        let roots_at_crate = declaration.contains("crate::") || declaration.contains("saguin::");
        if roots_at_crate || declaration.contains("super::") {
            for (_, word) in identifiers(declaration) {
                if modules.contains(&word) {
                    named.insert(word.to_string());
                }
            }
        }
    }
    named
}

/// What one file of a layer names that it must not: `(file, module)`.
fn layer_breaches(layer: &str, forbidden: &[&str]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src().join(layer), &mut files);
    assert!(!files.is_empty(), "src/{layer} holds no Rust file");
    let mut breaches = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("read a source file");
        // Unit tests may build their settings from a configuration.
        for module in crate_modules_named(&code_of(&without_test_module(&text)), forbidden) {
            let shown = file.strip_prefix(src()).unwrap_or(&file).display();
            breaches.push((format!("src/{shown}"), module));
        }
    }
    breaches
}

#[test]
fn no_layer_imports_a_layer_above_it() {
    let mut breaches = Vec::new();
    for (layer, forbidden) in LAYERS {
        breaches.extend(layer_breaches(layer, forbidden));
    }
    assert!(
        breaches.is_empty(),
        "these files import a layer above their own; take a settings type of the layer's own instead: {breaches:?}"
    );
}

/// The first segment of each item of a `use` group, such as `a` and `B`
/// in `{a::{c, d}, B}`: what the group takes from its parent.
fn group_heads(group: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut expect_head = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => expect_head = true,
            c if expect_head && depth == 0 && is_ident_char(c) => {
                let len = group[at..]
                    .find(|c| !is_ident_char(c))
                    .unwrap_or(group.len() - at);
                heads.push(&group[at..at + len]);
                expect_head = false;
            }
            _ => {}
        }
    }
    heads
}

/// The modules of `src/config` and, for each, the config modules its
/// non-test code uses. `mod.rs` is `mod`: a child naming one of its items
/// (`super::Config`) uses it.
fn config_graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    module_graph("config", files)
}

/// The same graph for the modules of `src/<layer>`, given as name -> text.
fn module_graph(
    layer: &str,
    files: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let in_crate = format!("crate::{layer}::");
    let in_lib = format!("saguin::{layer}::");
    let group_in_crate = format!("crate::{layer}::{{");
    let children: Vec<&str> = files
        .keys()
        .map(String::as_str)
        .filter(|m| *m != "mod")
        .collect();
    let module_of = |word: &str| {
        if children.contains(&word) {
            word.to_string()
        } else {
            "mod".to_string()
        }
    };
    let mut graph = BTreeMap::new();
    for (module, text) in files {
        let code = code_of(&without_test_module(text));
        let mut uses = BTreeSet::new();
        for (at, word) in identifiers(&code) {
            let before = code[..at].trim_end();
            let after = code[at + word.len()..].trim_start();
            if module == "mod" {
                // The parent names a child as the first segment of a path.
                let starts_path = !before.ends_with("::") && after.starts_with("::");
                if starts_path && children.contains(&word) {
                    uses.insert(word.to_string());
                }
                continue;
            }
            let through_parent = before.ends_with("super::")
                || before.ends_with(&in_crate)
                || before.ends_with(&in_lib);
            if through_parent && word != "super" {
                uses.insert(module_of(word));
            }
        }
        if module != "mod" {
            for declaration in use_declarations(&code) {
                let groups = declaration
                    .split("super::{")
                    .skip(1)
                    .chain(declaration.split(group_in_crate.as_str()).skip(1));
                for group in groups {
                    for head in group_heads(group) {
                        if head != "self" {
                            uses.insert(module_of(head));
                        }
                    }
                }
            }
        }
        uses.remove(module);
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

fn config_files() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(&src().join("config"), &mut files);
    files
        .into_iter()
        .filter(|f| f.file_stem().is_some_and(|s| s != "tests"))
        .map(|f| {
            let name = f.file_stem().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&f).expect("read a config file"))
        })
        .collect()
}

#[test]
fn config_modules_import_each_other_without_a_cycle() {
    let graph = config_graph(&config_files());
    // The walk is really seen: the top reaches the domain files, which
    // reach the helpers.
    assert!(graph["mod"].contains("parse"), "{graph:?}");
    assert!(graph["channels"].contains("queue"), "{graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the config modules import each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
}

/// The modules of `src/store` that production builds hold, name -> text:
/// `mod.rs` (the facade that re-exports, and the `Provider` trait every
/// layer names) and the modules `mod.rs` declares under `#[cfg(test)]`
/// are left out.
fn store_files() -> BTreeMap<String, String> {
    let dir = src().join("store");
    let facade = fs::read_to_string(dir.join("mod.rs")).expect("read src/store/mod.rs");
    let mut test_only = BTreeSet::new();
    let mut lines = facade.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                let item = next.strip_prefix("pub(crate) ").unwrap_or(next);
                if let Some(name) = item.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                    test_only.insert(name.to_string());
                }
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files
        .into_iter()
        .filter(|f| f.parent() == Some(dir.as_path()))
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|name| name != "mod" && !test_only.contains(name))
        .map(|name| {
            let text =
                fs::read_to_string(dir.join(format!("{name}.rs"))).expect("read a store file");
            (name, text)
        })
        .collect()
}

#[test]
fn store_modules_import_each_other_without_a_cycle() {
    let mut graph = module_graph("store", &store_files());
    for uses in graph.values_mut() {
        uses.remove("mod");
    }
    // The walk is really seen: the provider reaches the journal's replay,
    // which reaches the seam at the bottom; the test-only disk is not in it.
    assert!(graph["redb"].contains("replay"), "{graph:?}");
    assert!(graph["replay"].contains("journal"), "{graph:?}");
    assert!(graph["files"].contains("disk"), "{graph:?}");
    assert!(!graph.contains_key("sim_disk"), "{graph:?}");
    assert!(
        graph["disk"].is_empty(),
        "the seam is the bottom: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the store modules import each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn config_reading_helpers_are_leaves() {
    let graph = config_graph(&config_files());
    for (helper, may_use) in CONFIG_LEAVES {
        let uses = graph
            .get(helper)
            .unwrap_or_else(|| panic!("src/config/{helper}.rs is missing"));
        let extra: Vec<&String> = uses
            .iter()
            .filter(|u| !may_use.contains(&u.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "src/config/{helper}.rs is a reading helper and uses only {may_use:?}, but it also uses {extra:?}"
        );
    }
}

/// The checks above would catch what they look for.
#[test]
fn the_checks_see_an_import_and_a_cycle() {
    let forbidden = ["config", "net"];
    for code in [
        "use crate::config::Config;",
        "use crate::{codec, config};",
        "fn f() { crate::config::queue::dead_letter_topic(a, b); }",
        "use super::super::net::Settings;",
        "use saguin::config;",
    ] {
        assert!(
            !crate_modules_named(&code_of(code), &forbidden).is_empty(),
            "not seen: {code}"
        );
    }
    for code in [
        "// see crate::config::Config",
        "let config = load(); config.broker.id",
        "use crate::core::Settings;",
    ] {
        assert!(
            crate_modules_named(&code_of(code), &forbidden).is_empty(),
            "seen in: {code}"
        );
    }

    let files: BTreeMap<String, String> = [
        ("mod", "mod a;\nmod b;\npub use a::A;\n"),
        (
            "a",
            "use super::b::B;\n#[cfg(test)]\nmod tests {\n    use super::super::c;\n}\n",
        ),
        ("b", "use super::{findings, a::{A, Z}};\n"),
        ("findings", "pub struct F;\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let graph = config_graph(&files);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(
        graph["b"],
        BTreeSet::from(["a".to_string(), "findings".to_string()])
    );
    let cycle = find_cycle(&graph).expect("a and b use each other");
    assert!(cycle.contains(&"a".to_string()) && cycle.contains(&"b".to_string()));

    let to_parent: BTreeMap<String, String> = [
        (
            "mod",
            "mod a;\npub fn load() { a::read() }\npub struct Config;\n",
        ),
        ("a", "use super::{Config, DEFAULT};\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert!(find_cycle(&config_graph(&to_parent)).is_some());
}
