//! The walk over the YAML tree from its top: `broker:`, then `channels:`
//! checked against it.

use serde_yaml::Value;

use super::bridges;
use super::broker::{broker, BrokerConfig};
use super::channels::{self, ChannelConfig};
use super::files;
use super::findings::Findings;
use super::include::Origin;
use super::table::{table, Keys};

/// The broker, its channels and its bridges.
pub(super) type Parsed = (
    BrokerConfig,
    Vec<ChannelConfig>,
    Vec<crate::bridge::BridgeSettings>,
);

const ROOT_KEYS: Keys = Keys {
    supported: &["broker", "channels", "bridges"],
    not_yet: &[],
};

/// Walks the whole tree and returns the broker's configuration and its
/// channels, or every finding. With `read_files`, the certificates, keys
/// and acl_file it names are read too, whatever the walk found.
pub(super) fn root(
    value: &Value,
    origin: &Origin<'_>,
    read_files: bool,
) -> Result<Parsed, Vec<String>> {
    let mut f = Findings::default();
    // An empty file reads as an empty mapping, and is refused for its
    // missing broker.id like any other file without one.
    let parsed = table(&mut f, "", value, &ROOT_KEYS).and_then(|t| {
        let (broker, scope) = broker(&mut f, t.get("broker").unwrap_or(&Value::Null), origin);
        let channels = channels::parse(&mut f, t.get("channels"), &scope, origin);
        let bridges = bridges::parse(&mut f, t.get("bridges"));
        if read_files {
            files::check(&mut f, channels.as_deref());
        }
        Some((broker?, channels?, bridges?))
    });
    match parsed {
        Some(parsed) if f.is_empty() => Ok(parsed),
        _ if !f.is_empty() => Err(f.into_vec()),
        // Every path that yields None records a finding first; this arm
        // keeps a slip in that rule from becoming an accepted file.
        _ => Err(vec![
            "the configuration could not be read, for a reason this version failed to name"
                .to_string(),
        ]),
    }
}
