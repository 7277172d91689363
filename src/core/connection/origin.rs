//! What the network shell knows of a connection before its CONNECT.

/// Where a connection came in, handed to [`crate::core::Broker::accept`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Index of the MQTT door (listener) it arrived on, in configuration order.
    pub door: usize,
    /// The user name a verified client certificate gives it, on a door that
    /// takes the certificate as the user name; `None` otherwise. Boxed
    /// again so that the field is one pointer, not two: few doors name
    /// their clients by certificate, and every connection entry holds it.
    pub certificate_user: Option<Box<Box<str>>>,
}
