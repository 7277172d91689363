//! Sagüin: an MQTT 3.1.1 and 5 broker for edge gateways.
//!
//! - [`acl`]: what a client may do: the authorization file's model and decisions;
//! - [`auth`]: who may connect: password files and each door's rule;
//! - [`bridge`]: bridges to another broker, their protocol state sans-IO;
//! - [`codec`]: the MQTT 3.1.1 and 5 wire format, pure functions over bytes;
//! - [`config`]: the YAML configuration and its validation;
//! - [`core`]: the broker's rules as a sans-IO state machine;
//! - [`logging`]: the log lines' formats and the connection each is about;
//! - [`net`]: the smol shell that connects the core to sockets and a clock;
//! - [`ops`]: the operations listener: health, metrics and `/v1` routes;
//! - [`store`]: storage providers (redb, memory) and the storage thread;
//! - [`tools`]: the operator's command-line tools (route, inspect,
//!   conversions, backup);
//! - [`unix_socket`]: a door's Unix socket, held by one broker at a time.

pub mod acl;
pub mod auth;
pub mod bridge;
#[cfg(test)]
pub(crate) mod captured_log;
pub mod codec;
pub mod config;
pub mod core;
pub(crate) mod fast_hash;
pub(crate) mod lock_file;
pub(crate) mod log_limit;
pub mod logging;
pub mod net;
pub mod ops;
pub mod store;
pub mod tools;
pub mod unix_socket;
