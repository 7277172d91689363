//! The configuration embedded in the binary, used when none is given.
//!
//! It is the one configuration with no file, so its relative paths have
//! only one directory to mean: the working directory the broker was
//! started in. A configuration file still writes absolute paths (a copy
//! of this one given with --config is told so), so that where its records
//! live never depends on where the broker was started.

use std::path::Path;

use serde_yaml::Value;

/// The configuration shipped with the broker, used when none is given.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../config/saguin.yaml");

/// The source name [`default_config_in`] reports.
pub const EMBEDDED_SOURCE: &str = "<embedded default>";

/// The directory, under the working directory, that the embedded default
/// keeps its records in. The broker creates it when it is missing.
pub const EMBEDDED_DATA_DIR: &str = "data";

/// The provider keys naming a place on disk.
const PATH_KEYS: [&str; 2] = ["file_path", "snapshot_dir"];

/// The shipped default as a YAML tree, its `./` paths anchored at
/// `working_dir`; [`super::default_config_in`] validates it.
///
/// # Panics
///
/// Only if `config/saguin.yaml` is not YAML, which a unit test rules out.
pub(super) fn tree_in(working_dir: &Path) -> Value {
    let mut root: Value = match serde_yaml::from_str(DEFAULT_CONFIG_YAML) {
        Ok(root) => root,
        Err(e) => panic!("the shipped default configuration is not YAML: {e}"),
    };
    anchor_provider_paths(&mut root, working_dir);
    root
}

/// Rewrites each provider path written as `./<rest>` to
/// `<working_dir>/<rest>`.
fn anchor_provider_paths(root: &mut Value, working_dir: &Path) {
    let Some(Value::Mapping(providers)) = root
        .get_mut("broker")
        .and_then(|broker| broker.get_mut("storage"))
        .and_then(|storage| storage.get_mut("providers"))
    else {
        return;
    };
    for (_name, provider) in providers.iter_mut() {
        for key in PATH_KEYS {
            if let Some(Value::String(path)) = provider.get_mut(key) {
                if let Some(rest) = path.strip_prefix("./") {
                    *path = working_dir.join(rest).display().to_string();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{default_config_in, ProviderKind};

    #[test]
    fn sessions_and_retained_messages_are_kept_in_redb_under_the_working_directory() {
        let c = default_config_in(Path::new("/srv/gateway"));
        let storage = c.broker.storage.as_ref().expect("a storage block");
        let provider = storage
            .provider(&storage.default_provider)
            .expect("the default provider");
        let ProviderKind::Redb { file_path, .. } = &provider.kind else {
            panic!("the default provider is not redb: {provider:?}");
        };
        assert_eq!(
            file_path.parent(),
            Some(Path::new("/srv/gateway").join(EMBEDDED_DATA_DIR).as_path())
        );
        assert_eq!(
            c.broker.session.storage.as_deref(),
            Some(provider.name.as_str())
        );
        assert_eq!(
            c.broker.retained.storage.as_deref(),
            Some(provider.name.as_str())
        );
    }

    #[test]
    fn a_copy_of_the_default_given_as_a_file_is_told_to_write_absolute_paths() {
        let e = crate::config::parse(DEFAULT_CONFIG_YAML, "copy.yaml").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("file_path") && text.contains("absolute"),
            "{text}"
        );
    }
}
