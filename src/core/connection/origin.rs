//! What the network shell knows of a connection before its CONNECT.

/// Where a connection came in, handed to [`crate::core::Broker::accept`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Index of the MQTT door (listener) it arrived on, in configuration order.
    pub door: usize,
    /// The user name a verified client certificate gives it, on a door that
    /// takes the certificate as the user name; `None` otherwise.
    pub certificate_user: Option<Box<str>>,
}
