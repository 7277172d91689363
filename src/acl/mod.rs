//! What a client may do: the authorization file's model and its decisions.
//!
//! An [`Acl`] is what `broker.mqtt.acl_file` says once read and checked:
//! roles holding rules, and entries giving roles to user names by pattern.
//! At CONNECT the entry that applies to a user name is turned into
//! [`Grants`] - every `%u` and `%c` put in, every rule filed under the
//! channel it is about - so a decision on a publish or a delivery looks
//! only at that client's own rules for the one channel its topic belongs
//! to, never at the whole file.
//!
//! Grant-only: nothing is allowed until a rule allows it, and a rule can
//! only add. The one denial is a feature taken away by a `broker: features`
//! rule, which any role can take.
//!
//! Pure: no I/O and no configuration types. The configuration reads the
//! file into these types; the core asks [`Grants`] its questions.

pub mod explain;
pub mod filter;
mod grants;

pub use grants::{ChannelIndex, Grants};

/// The kind of channel a channel rule names, which decides its verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelType {
    Append,
    Latest,
    Queue,
}

impl ChannelType {
    /// The word the configuration's `type:` writes.
    pub fn name(self) -> &'static str {
        match self {
            ChannelType::Append => "append",
            ChannelType::Latest => "latest",
            ChannelType::Queue => "queue",
        }
    }

    /// The verbs a rule on a channel of this type may name.
    pub fn verbs(self) -> Verbs {
        match self {
            ChannelType::Append => Verbs::WRITE.with(Verbs::READ).with(Verbs::SEEK),
            ChannelType::Latest => Verbs::WRITE.with(Verbs::READ).with(Verbs::DELETE),
            ChannelType::Queue => Verbs::WRITE.with(Verbs::CONSUME),
        }
    }
}

/// A set of verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verbs(u8);

impl Verbs {
    pub const NONE: Verbs = Verbs(0);
    pub const WRITE: Verbs = Verbs(1);
    pub const READ: Verbs = Verbs(2);
    pub const SEEK: Verbs = Verbs(4);
    pub const DELETE: Verbs = Verbs(8);
    pub const CONSUME: Verbs = Verbs(16);
    pub const DISCONNECT: Verbs = Verbs(32);

    /// Every verb, in the order they are printed.
    pub const ALL: [(Verbs, &'static str); 6] = [
        (Verbs::WRITE, "write"),
        (Verbs::READ, "read"),
        (Verbs::SEEK, "seek"),
        (Verbs::DELETE, "delete"),
        (Verbs::CONSUME, "consume"),
        (Verbs::DISCONNECT, "disconnect"),
    ];

    pub const fn with(self, other: Verbs) -> Verbs {
        Verbs(self.0 | other.0)
    }

    pub fn contains(self, other: Verbs) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn named(name: &str) -> Option<Verbs> {
        Verbs::ALL.iter().find(|(_, n)| *n == name).map(|(v, _)| *v)
    }

    /// The names, in the order [`Verbs::ALL`] gives.
    pub fn names(self) -> Vec<&'static str> {
        Verbs::ALL
            .iter()
            .filter(|(v, _)| self.contains(*v))
            .map(|(_, n)| *n)
            .collect()
    }
}

/// A set of the features a `broker: features` rule may take away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features(u8);

impl Features {
    pub const NONE: Features = Features(0);
    /// A session that outlives its connection.
    pub const PERSISTENT: Features = Features(1);
    pub const WILL: Features = Features(2);
    pub const SHARE: Features = Features(4);
    /// A retained value on a broadcast topic.
    pub const RETAINED: Features = Features(8);
    pub const QOS2: Features = Features(16);

    pub const ALL: [(Features, &'static str); 5] = [
        (Features::PERSISTENT, "persistent"),
        (Features::WILL, "will"),
        (Features::SHARE, "share"),
        (Features::RETAINED, "retained"),
        (Features::QOS2, "qos2"),
    ];

    pub const fn with(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }

    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub fn named(name: &str) -> Option<Features> {
        Features::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(f, _)| *f)
    }

    pub fn names(self) -> Vec<&'static str> {
        Features::ALL
            .iter()
            .filter(|(f, _)| self.contains(*f))
            .map(|(_, n)| *n)
            .collect()
    }
}

/// What a rule is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The topics that resolve to the named channel.
    Channel(String),
    /// Broadcast: the topics no channel claims.
    Topic,
    /// `broker: sessions`: hanging other clients up.
    Sessions,
    /// `broker: features`: features taken away.
    Features,
}

/// One rule of a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub subject: Subject,
    /// The filter as written (`filter:` or `topic:`), braces and all.
    pub written_filter: Option<String>,
    /// That filter with `{a,b}` expanded, `%u` and `%c` not yet put in.
    /// Empty on a channel rule without `filter:`: the whole channel.
    pub filters: Vec<String>,
    pub verbs: Verbs,
    pub denies: Features,
}

impl Rule {
    /// Whether a filter of this rule names `%c`.
    pub fn uses_client_id(&self) -> bool {
        self.filters.iter().any(|f| f.contains("%c"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub rules: Vec<Rule>,
}

/// Publish bounds one entry sets in place of the broker-wide ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub publish_rate_per_s: Option<u32>,
    pub publish_bytes_per_s: Option<u64>,
}

/// One key under `users:`: a pattern and what it gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// A user name, `*` standing for any run of characters.
    pub pattern: String,
    /// Indexes into [`Acl::roles`].
    pub roles: Vec<usize>,
    /// Which client ids may carry the name; `None` for any.
    pub client_ids: Option<Vec<String>>,
    /// `None` where the entry writes no `limits:`.
    pub limits: Option<Limits>,
}

impl Entry {
    /// Whether `client_id` may connect under `user` by this entry.
    pub fn admits_client_id(&self, user: &str, client_id: &str) -> bool {
        let Some(patterns) = &self.client_ids else {
            return true;
        };
        patterns.iter().any(|pattern| {
            // A name holding `*` is never put into a pattern: it would
            // widen it.
            if pattern.contains("%u") && user.contains('*') {
                return false;
            }
            filter::glob_matches(&pattern.replace("%u", user), client_id)
        })
    }
}

/// A checked authorization file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    /// Where it was read from, for logs and `--acl`.
    pub source: String,
    pub roles: Vec<Role>,
    /// In the order written.
    pub entries: Vec<Entry>,
}

impl Acl {
    /// The entry that applies to `user`, the one spelling it out most
    /// exactly among those matching; the file is refused at load where two
    /// could tie.
    pub fn entry_for(&self, user: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .filter(|e| filter::glob_matches(&e.pattern, user))
            .max_by_key(|e| filter::literal_count(&e.pattern))
    }

    /// Every entry whose pattern matches `user`, in file order.
    pub fn entries_matching<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.entries
            .iter()
            .filter(move |e| filter::glob_matches(&e.pattern, user))
    }

    /// Whether `client_id` may connect under `user`. A name no entry
    /// matches may connect and is granted nothing.
    pub fn admits_client_id(&self, user: &str, client_id: &str) -> bool {
        self.entry_for(user)
            .is_none_or(|entry| entry.admits_client_id(user, client_id))
    }
}

#[cfg(test)]
mod tests;
