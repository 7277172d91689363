//! What the network shell knows of a connection before its CONNECT.

use std::fmt;
use std::net::SocketAddr;
use std::rc::Rc;

/// Where a connection came in, handed to [`crate::core::Broker::accept`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Index of the MQTT door (listener) it arrived on, in configuration order.
    pub door: usize,
    /// Where it comes from, for logs and `/v1/operations/sessions`.
    /// Inline, as nearly every connection has one: a box for it would
    /// cost an allocation each.
    pub source: Option<Source>,
    /// What only some doors learn of a connection, behind one pointer:
    /// every connection entry holds the field, and a connection without
    /// a verified certificate leaves it empty.
    pub introduction: Option<Box<Introduction>>,
}

/// Where a connection comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A TCP socket's peer, or the client a proxy speaks for: kept as the
    /// address, written as text only when a line or a row shows it.
    Peer(SocketAddr),
    /// What only text says: the process at the far end of a Unix socket.
    Named(Rc<str>),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Peer(address) => address.fmt(f),
            Source::Named(name) => f.write_str(name),
        }
    }
}

/// What a door learnt of a connection beyond its socket and its source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Introduction {
    /// The user name a verified client certificate gives it: one this
    /// broker's TLS handshake verified, or one a proxy in front verified
    /// and named in its PROXY header.
    pub certificate_user: Option<Box<str>>,
}

impl Origin {
    /// The name its verified client certificate gives it, if any.
    pub fn certificate_user(&self) -> Option<&str> {
        self.introduction.as_ref()?.certificate_user.as_deref()
    }

    /// Where it comes from, when its door learnt that.
    pub fn source(&self) -> Option<&Source> {
        self.source.as_ref()
    }

    /// The introduction, made empty if there is none yet.
    pub fn introduction_mut(&mut self) -> &mut Introduction {
        self.introduction.get_or_insert_with(Box::default)
    }
}
