//! What a client may do, asked where it acts: at CONNECT, on each
//! PUBLISH and SUBSCRIBE, and again on every delivery, so a grant
//! withdrawn by a reload stops the next message rather than the next
//! SUBSCRIBE (a resumed session sends none).
//!
//! Each session's grants are compiled from the authorization file when
//! its client connects, under the user name it connected with, and again
//! for every session when the file is replaced. Without a file every
//! question is answered yes.
//!
//! The structural refusals (reserved space, queue forms, the wildcard
//! boundary) are asked first and refuse whatever a grant says: a rule may
//! only narrow what the broker already allows.

use std::collections::HashMap;
use std::rc::Rc;

use crate::acl::{Acl, ChannelIndex, Features, Grants, Limits, Verbs};
use crate::codec::{Connect, Properties, ProtocolVersion, Publish, QoS, Subscribe};
use crate::core::channel::append::seek::seek_channel;
use crate::core::channel::latest::point_read::is_request;
use crate::core::channel::queue::rules::response_name;
use crate::core::message::Message;
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key, Transport};
use crate::log_limit::{limited, LogLimit};

/// A rule granting nothing to a name: written at each CONNECT under it.
pub(crate) static GRANT_WITHHELD: LogLimit =
    LogLimit::new("a rule grants a user nothing", log::Level::Warn, 10, 60_000);

/// The broker's own topic space, answered by its own rules.
const RESERVED: &str = "$saguin/";

/// The authorization file in force and what it grants each session.
#[derive(Default)]
pub(crate) struct Authorization {
    acl: Option<Rc<Acl>>,
    /// By client id: the user name its session last connected under, and
    /// what that name is granted.
    by_client: HashMap<Rc<str>, Held>,
}

/// The topic's part of a delivery check (see [`Broker::read_check`]).
pub(crate) struct ReadCheck<'t> {
    topic_name: &'t str,
    /// No file in force, or the broker's own space: every session may read.
    open: bool,
    channel: Option<usize>,
}

struct Held {
    user: Box<str>,
    grants: Grants,
}

/// The core's channels as the decision engine names them.
struct Channels<'a>(&'a [crate::core::channel::Channel]);

impl ChannelIndex for Channels<'_> {
    fn channel_count(&self) -> usize {
        self.0.len()
    }
    fn index_of(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|c| c.settings.name == name)
    }
    fn filters_of(&self, channel: usize) -> &[String] {
        &self.0[channel].settings.filters
    }
}

/// What a CONNECT is granted: its grants, or a refusal for its CONNACK.
pub(crate) struct Admitted {
    grants: Option<Grants>,
    user: Box<str>,
}

impl Admitted {
    /// The Session Expiry Interval a client may keep: 0 where its roles
    /// take `persistent` away.
    pub(crate) fn expiry_s(&self, granted_s: u32) -> u32 {
        match self.denies(Features::PERSISTENT) {
            true => 0,
            false => granted_s,
        }
    }

    fn denies(&self, feature: Features) -> bool {
        self.grants.as_ref().is_some_and(|g| g.denies(feature))
    }

    /// What an MQTT 5 CONNACK says the client's roles took away, in MQTT's
    /// own signals.
    pub(crate) fn connack_properties(&self, properties: &mut Properties) {
        if self.denies(Features::QOS2) {
            properties.maximum_qos = Some(1);
        }
        if self.denies(Features::SHARE) {
            properties.shared_subscription_available = Some(0);
        }
    }
}

impl Broker {
    /// Puts `acl` in force (`None`: everything allowed) for every session,
    /// then wakes what a returned grant may have stalled.
    pub fn set_acl(&mut self, acl: Option<Acl>, now_ms: u64, out: &mut impl Transport) {
        let acl = acl.map(Rc::new);
        let old = std::mem::take(&mut self.authorization.by_client);
        let mut by_client = HashMap::new();
        if let Some(acl) = &acl {
            for (_, session) in self.sessions.iter() {
                let client_id = &session.client_id;
                let user: Box<str> = old
                    .get(client_id)
                    .map(|h| h.user.clone())
                    .or_else(|| self.persist_user_name(client_id).map(Into::into))
                    .unwrap_or_default();
                let grants = self.compile_grants(acl, &user, client_id);
                by_client.insert(Rc::clone(client_id), Held { user, grants });
            }
        }
        self.authorization = Authorization { acl, by_client };
        for session in self.sessions.keys() {
            if self.session_is_connected(session) {
                self.take_back_unreadable(session, false, now_ms, out);
            }
        }
        for reader in self.readers.keys() {
            self.pump_reader(reader, now_ms, out);
        }
        self.pump_all_latest(now_ms, out);
        for session in self.sessions.keys() {
            self.offer_to_worker(session, now_ms, out);
        }
    }

    /// The acl_file in force, if any.
    pub(crate) fn acl_in_force(&self) -> Option<&Acl> {
        self.authorization.acl.as_deref()
    }

    /// Whether an authorization file is in force.
    pub fn has_acl(&self) -> bool {
        self.authorization.acl.is_some()
    }

    /// At CONNECT, once the client is authenticated: may this client id
    /// carry this name, and may it leave the Will it asks for.
    pub(crate) fn authorize_connect(
        &self,
        connect: &Connect,
        user: Option<&str>,
        now_ms: u64,
    ) -> Result<Admitted, Refusal> {
        let user: Box<str> = user.unwrap_or("").into();
        let Some(acl) = &self.authorization.acl else {
            return Ok(Admitted { grants: None, user });
        };
        // Only a bridge's own session holds such an id (refused to any
        // other client before this): the broker's own, it is not asked.
        if crate::core::is_bridge_client_id(&connect.client_id) {
            let grants = Grants::unrestricted(self.channels.len());
            return Ok(Admitted {
                grants: Some(grants),
                user,
            });
        }
        // An empty id is asked as written: one the broker assigns would
        // otherwise slip past a pattern.
        if !acl.admits_client_id(&user, &connect.client_id) {
            // The refusal's own line follows, through its limit.
            log::debug!(
                "refusing client id {:?} under user {user:?}: the acl_file's client_ids for that name do not admit it",
                connect.client_id
            );
            return Err(Refusal::ClientIdNotAdmitted);
        }
        let grants = Grants::compile(acl, &user, &connect.client_id, &Channels(&self.channels));
        for (role, rule, marker) in grants.withheld() {
            limited!(
                GRANT_WITHHELD,
                now_ms,
                "user {user:?} (client {:?}) is granted nothing by rule {rule} of role {role}: the name {marker} would put in holds +, # or /",
                connect.client_id
            );
        }
        if let Some(will) = &connect.will {
            let broadcast = self.channel_for(&will.topic).is_none();
            if grants.denies(Features::WILL) {
                return Err(Refusal::WillDenied);
            }
            if will.retain && broadcast && grants.denies(Features::RETAINED) {
                return Err(Refusal::WillRetainDenied);
            }
            if will.qos == QoS::ExactlyOnce && grants.denies(Features::QOS2) {
                return Err(Refusal::WillQos2Denied);
            }
            if !grants.allows(Verbs::WRITE, self.channel_for(&will.topic), &will.topic) {
                return Err(Refusal::WillNotAuthorized);
            }
        }
        Ok(Admitted {
            grants: Some(grants),
            user,
        })
    }

    /// Keeps a CONNECT's grants for its session (its CONNACK has said what
    /// they take away: [`Admitted::connack_properties`]).
    pub(crate) fn hold_grants(&mut self, session_key: Key, admitted: Admitted) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let client_id = Rc::clone(&session.client_id);
        let Some(grants) = admitted.grants else {
            self.authorization.by_client.remove(&client_id);
            return;
        };
        let held = Held {
            user: admitted.user,
            grants,
        };
        self.authorization.by_client.insert(client_id, held);
    }

    /// What `user` is granted under `acl` for a session of `client_id`; a
    /// bridge's own session is the broker's, and is granted everything.
    fn compile_grants(&self, acl: &Acl, user: &str, client_id: &str) -> Grants {
        let channels = Channels(&self.channels);
        match crate::core::is_bridge_client_id(client_id) {
            true => Grants::unrestricted(channels.channel_count()),
            false => Grants::compile(acl, user, client_id, &channels),
        }
    }

    /// A CONNECT refused after it claimed a session it resumed: the grants
    /// compiled for that CONNECT go, and the session holds again what the
    /// name it last connected under is granted (as a reload would compile
    /// it), so a refused client leaves no rights behind in the session.
    pub(crate) fn give_grants_back(&mut self, session_key: Key, user: Option<&str>) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let client_id = Rc::clone(&session.client_id);
        let Some(acl) = self.authorization.acl.clone() else {
            self.authorization.by_client.remove(&client_id);
            return;
        };
        let user: Box<str> = user.unwrap_or("").into();
        let grants = self.compile_grants(&acl, &user, &client_id);
        self.authorization
            .by_client
            .insert(client_id, Held { user, grants });
    }

    /// A session ended: its grants go with it.
    pub(crate) fn forget_grants(&mut self, client_id: &str) {
        self.authorization.by_client.remove(client_id);
    }

    fn grants_of_session(&self, session_key: Key) -> Option<&Grants> {
        self.authorization.acl.as_ref()?;
        let session = self.sessions.get(session_key)?;
        self.authorization
            .by_client
            .get(&session.client_id)
            .map(|h| &h.grants)
    }

    fn grants_of_connection(&self, conn: Key) -> Option<&Grants> {
        // Asked on every publish: without a file, no session is looked up.
        self.authorization.acl.as_ref()?;
        self.grants_of_session(self.session_of(conn)?)
    }

    /// Whether `session_key` may be delivered a message on `topic_name`.
    /// A session with an authorization file in force and no grants (none
    /// compiled) is delivered nothing.
    pub(crate) fn may_read(&self, session_key: Key, topic_name: &str) -> bool {
        self.may_read_checked(session_key, &self.read_check(topic_name))
    }

    /// What every delivery of a message on `topic_name` is checked against:
    /// resolved once for a fan-out, not once per target.
    pub(crate) fn read_check<'t>(&self, topic_name: &'t str) -> ReadCheck<'t> {
        // Answers under $saguin/ go to the asking connection alone.
        let open = self.authorization.acl.is_none() || topic_name.starts_with(RESERVED);
        ReadCheck {
            topic_name,
            open,
            channel: if open {
                None
            } else {
                self.channel_for(topic_name)
            },
        }
    }

    /// [`Broker::may_read`] with the topic's part already resolved.
    pub(crate) fn may_read_checked(&self, session_key: Key, check: &ReadCheck) -> bool {
        check.open
            || self
                .grants_of_session(session_key)
                .is_some_and(|g| g.allows(Verbs::READ, check.channel, check.topic_name))
    }

    /// Whether a channel reader's next record is one its session would be
    /// delivered and may no longer read.
    pub(crate) fn withheld_from_reader(
        &self,
        reader_key: Key,
        message: &Rc<Message>,
        offset: u64,
    ) -> bool {
        if self.authorization.acl.is_none() {
            return false;
        }
        let Some(reader) = self.readers.get(reader_key) else {
            return false;
        };
        let own = self.published_by(reader.session, message);
        crate::core::channel::delivery_for(reader_key, reader, message, offset, own).is_some()
            && !self.may_read(reader.session, &message.topic)
    }

    /// Whether `worker` may be offered a job of the queue on `channel`.
    pub(crate) fn may_consume(&self, worker: Key, channel: usize) -> bool {
        self.authorization.acl.is_none()
            || self
                .grants_of_session(worker)
                .is_some_and(|g| g.holds_on_channel(Verbs::CONSUME, channel))
    }

    /// Whether the Will of `client_id` may be published now, asked again
    /// as that client when it fires: the file may have been reloaded.
    pub(crate) fn may_publish_will(&self, client_id: &str, topic_name: &str) -> bool {
        if self.authorization.acl.is_none() {
            return true;
        }
        self.authorization
            .by_client
            .get(client_id)
            .is_some_and(|h| {
                h.grants
                    .allows(Verbs::WRITE, self.channel_for(topic_name), topic_name)
            })
    }

    /// A publish that uses a feature the client's roles took away is a
    /// protocol breach MQTT closes the connection for: QoS 2 where Maximum
    /// QoS 1 was said, a retained broadcast value where retain is not had.
    pub(crate) fn feature_breach(&self, conn: Key, publish: &Publish) -> Option<Refusal> {
        let grants = self.grants_of_connection(conn)?;
        if publish.qos == QoS::ExactlyOnce && grants.denies(Features::QOS2) {
            return Some(Refusal::Qos2Denied);
        }
        let broadcast =
            !publish.topic.starts_with(RESERVED) && self.channel_for(&publish.topic).is_none();
        if publish.retain && broadcast && grants.denies(Features::RETAINED) {
            return Some(Refusal::RetainDenied);
        }
        None
    }

    /// May this client do what its PUBLISH asks: `write` on the topic,
    /// `delete` for an empty value on a latest channel, `seek` on the
    /// channel a seek names, `read` for a point read, `consume` for a
    /// queue's answer.
    pub(crate) fn authorize_publish(&self, conn: Key, publish: &Publish) -> Result<(), Refusal> {
        if self.authorization.acl.is_none() {
            return Ok(());
        }
        let Some(grants) = self.grants_of_connection(conn) else {
            return Err(Refusal::PublishNotAuthorized);
        };
        let topic_name = publish.topic.as_str();
        let allowed = if topic_name == super::hang_up::HANG_UP_TOPIC {
            grants.may_disconnect()
        } else if let Some(name) = seek_channel(topic_name) {
            // A channel nobody configured is answered as it is without a file.
            Channels(&self.channels)
                .index_of(name)
                .is_none_or(|c| grants.holds_on_channel(Verbs::SEEK, c))
        } else if let Some(name) = response_name(topic_name) {
            Channels(&self.channels)
                .index_of(name)
                .is_none_or(|c| grants.holds_on_channel(Verbs::CONSUME, c))
        } else if is_request(topic_name) {
            self.authorize_request(grants, publish)
        } else {
            let channel = self.channel_for(topic_name);
            let deletes = publish.payload.is_empty()
                && channel.is_some_and(|c| self.channels[c].latest.is_some());
            let verb = if deletes { Verbs::DELETE } else { Verbs::WRITE };
            grants.allows(verb, channel, topic_name)
        };
        allowed.then_some(()).ok_or(Refusal::PublishNotAuthorized)
    }

    /// A point read asks `read` of the key it names; the catalogue is
    /// answered for any channel, its verbs being this client's own.
    fn authorize_request(&self, grants: &Grants, publish: &Publish) -> bool {
        if publish.topic.starts_with("$saguin/catalogue/") {
            return true;
        }
        let Ok(key) = std::str::from_utf8(&publish.payload) else {
            // Refused for its shape by the point read itself.
            return true;
        };
        match self.channel_for(key) {
            Some(channel) => grants.allows(Verbs::READ, Some(channel), key),
            None => true,
        }
    }

    /// The verbs of `offered` this connection holds on `channel`: all of
    /// them without an authorization file.
    pub(crate) fn verbs_held(&self, conn: Key, channel: usize, offered: Verbs) -> Verbs {
        if self.authorization.acl.is_none() {
            return offered;
        }
        let Some(grants) = self.grants_of_connection(conn) else {
            return Verbs::NONE;
        };
        Verbs::ALL
            .iter()
            .filter(|(verb, _)| offered.contains(*verb) && grants.holds_on_channel(*verb, channel))
            .fold(Verbs::NONE, |held, (verb, _)| held.with(*verb))
    }

    /// May this session subscribe to `filter` (a plain filter; a shared
    /// subscription's after `$share/<name>/`): `read` on every channel it
    /// reaches and on broadcast where it reaches any, granted whole.
    pub(crate) fn authorize_filter(&self, session_key: Key, filter: &str) -> Result<(), Refusal> {
        // The reserved space admits only the reply forms, which carry
        // answers to the subscriber's own requests.
        if self.authorization.acl.is_none() || filter.starts_with(RESERVED) {
            return Ok(());
        }
        let Some(grants) = self.grants_of_session(session_key) else {
            return Err(Refusal::SubscribeNotAuthorized);
        };
        let mut reach = self.claims.reach(filter);
        // A filter crossing a queue is never served its jobs: the queue
        // asks nothing of it.
        reach.channels.retain(|&c| !self.queues.is_queue(c));
        let channels = Channels(&self.channels);
        grants
            .allows_filter(
                Verbs::READ,
                filter,
                &reach.channels,
                reach.broadcast,
                &channels,
            )
            .then_some(())
            .ok_or(Refusal::SubscribeNotAuthorized)
    }

    /// May this session work the queue on `channel`.
    pub(crate) fn authorize_worker(&self, session_key: Key, channel: usize) -> Result<(), Refusal> {
        match self.may_consume(session_key, channel) {
            true => Ok(()),
            false => Err(Refusal::SubscribeNotAuthorized),
        }
    }

    /// A SUBSCRIBE from a client whose roles took a feature away: a
    /// `$share/` filter from MQTT 5 is a protocol breach (it was told
    /// Shared Subscription Available 0; 3.1.1, told nothing, is refused
    /// the filter in `admit_filter`), and QoS 2 is granted as 1.
    pub(crate) fn restrict_subscribe(
        &self,
        conn: Key,
        subscribe: &mut Subscribe,
    ) -> Option<Refusal> {
        let grants = self.grants_of_connection(conn)?;
        let version = self.version(conn)?;
        if grants.denies(Features::SHARE)
            && version == ProtocolVersion::V5
            && subscribe
                .filters
                .iter()
                .any(|(f, _)| f.starts_with("$share/"))
        {
            return Some(Refusal::ShareDenied);
        }
        if grants.denies(Features::QOS2) {
            for (_, options) in &mut subscribe.filters {
                options.qos = options.qos.min(QoS::AtLeastOnce);
            }
        }
        None
    }

    /// Whether this session's roles take shared subscriptions away: asked
    /// per filter, where a 3.1.1 client (told nothing at CONNECT) is
    /// refused one rather than closed.
    pub(crate) fn denies_share(&self, session_key: Key) -> bool {
        self.grants_of_session(session_key)
            .is_some_and(|g| g.denies(Features::SHARE))
    }

    /// The publish bounds of this client's own entry where it writes
    /// `limits:`; `None` holds it to the broker-wide ones.
    pub(crate) fn grants_limits(&self, conn: Key) -> Option<Limits> {
        self.grants_of_connection(conn).and_then(Grants::limits)
    }

    fn persist_user_name(&self, client_id: &str) -> Option<&str> {
        self.persist.user_name_of(client_id)
    }
}
