//! Bridges: this broker as a client of another, carrying records both
//! ways. The protocol state is sans-IO ([`link`]); `net::bridge` runs it
//! on sockets.

pub mod backoff;
pub mod link;
pub mod settings;
pub mod template;

pub use link::{Action, Carriage, Link, Local, BRIDGED_MARK};
pub use settings::{BridgeSettings, Direction, Peer, PeerTls, Rule, DEFAULT_WEBSOCKET_PATH};
