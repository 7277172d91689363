//! CONNECT: admission, session ownership, and every way a session ends.

use crate::core::refusal::Refusal;
use crate::core::refusal_counts::Reason;
use std::borrow::Cow;
use std::rc::Rc;

use crate::codec::{
    topic, Connack, Connect, DecodeError, Disconnect, Packet, Properties, ProtocolVersion, PubAck,
    ReasonCode, Will,
};
use crate::core::broadcast::topic_index::Target;
use crate::core::connection::packet_size;
use crate::core::message::{shared_properties, Delivery, Message};
use crate::core::observe::WillCause;
use crate::core::session::{OutboundStage, Session};
use crate::core::{Active, Broker, Key, Transport, TOPIC_ALIAS_MAXIMUM};
use crate::log_limit::{limited, LogLimit};

/// A refused CONNECT: a client retrying a wrong password in a loop would
/// otherwise write a line per attempt.
pub(crate) static CONNECT_REFUSED: LogLimit =
    LogLimit::new("refusing CONNECT", log::Level::Warn, 10, 10_000);

pub(super) fn has_control_character(text: &str) -> bool {
    text.chars()
        .any(|c| matches!(c, '\u{0001}'..='\u{001F}' | '\u{007F}'..='\u{009F}'))
}

fn has_reserved_user_property(properties: &Properties) -> bool {
    properties
        .user_properties
        .iter()
        .any(|(name, _)| name.starts_with("saguin-"))
}

/// What a refusing CONNACK's client said it can read.
#[derive(Clone, Copy)]
pub(crate) struct ConnackReader {
    pub version: ProtocolVersion,
    /// It did not ask for Reason Strings to be left out.
    pub problem_information: bool,
    pub max_packet_size: u32,
}

/// [`packet_size::fitted`] for a CONNACK.
fn fitted_connack(connack: Connack, version: ProtocolVersion, max_bytes: u32) -> Option<Connack> {
    let packet = Packet::Connack(connack);
    let trimmed = match packet_size::fitted(&packet, version, max_bytes)? {
        Cow::Borrowed(_) => None,
        Cow::Owned(trimmed) => Some(trimmed),
    };
    match trimmed.unwrap_or(packet) {
        Packet::Connack(connack) => Some(connack),
        _ => unreachable!("trimming keeps a packet's type"),
    }
}

impl Broker {
    /// Whether `conn` is a bridge's in-process session: the broker's own.
    pub(crate) fn is_bridge(&self, conn: Key) -> bool {
        self.connections.get(conn).is_some_and(|c| c.bridge)
    }

    /// The client ids of every bridge session held, connected or not: the
    /// bridges end those no configured rule names.
    pub fn bridge_client_ids(&self) -> Vec<String> {
        self.sessions
            .iter()
            .map(|(_, session)| &session.client_id)
            .filter(|id| crate::core::is_bridge_client_id(id))
            .map(|id| id.to_string())
            .collect()
    }

    /// Stores the moved channel positions of the session on bridge
    /// connection `conn` now rather than at the next
    /// `ack_commit_interval`: its link to the peer has gone, so its reader
    /// stops moving, as a consumer's does when it goes away. The commit is
    /// queued ahead of any write submitted after this call.
    pub fn store_bridge_positions(&mut self, conn: Key, out: &mut impl Transport) {
        if !self.is_bridge(conn) {
            return;
        }
        if let Some(session_key) = self.session_of(conn) {
            self.commit_positions(Some(session_key), out);
        }
    }

    /// Only a bridge's own session may hold a `saguin-bridge/` client id.
    fn admit_bridge_client_id(&self, conn: Key, connect: &Connect) -> Result<(), Refusal> {
        match crate::core::is_bridge_client_id(&connect.client_id) {
            true if !self.is_bridge(conn) => Err(Refusal::ClientIdReservedForBridges),
            _ => Ok(()),
        }
    }

    pub(crate) fn handle_connect(
        &mut self,
        conn: Key,
        connect: Connect,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        // Every check that can refuse a CONNECT runs before its session is
        // looked at, so a refused CONNECT changes nothing.
        let admitted = self
            .admit_certificate(conn)
            .and_then(|()| self.admit_connect(&connect))
            .and_then(|()| self.admit_bridge_client_id(conn, &connect))
            .and_then(|()| self.authenticate(conn, &connect, now_ms))
            .and_then(|()| self.authorize_connect(&connect, self.user_name(conn), now_ms));
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(refusal) => {
                self.turn_away(conn, &connect, &connect.client_id, refusal, now_ms, out);
                return;
            }
        };
        let version = connect.protocol_version;
        let client_id = if connect.client_id.is_empty() {
            self.sessions.assign_client_id()
        } else {
            connect.client_id.clone()
        };
        let assigned = connect.client_id.is_empty();

        let requested_expiry_s = match version {
            ProtocolVersion::V5 => connect.properties.session_expiry_interval_s.unwrap_or(0),
            // A 3.1.1 session kept past its connection never expires by
            // MQTT's rules; the broker's ceiling still applies.
            ProtocolVersion::V311 if connect.clean_start => 0,
            ProtocolVersion::V311 => u32::MAX,
        };
        let granted_expiry_s =
            admitted.expiry_s(requested_expiry_s.min(self.settings.max_session_expiry_s));
        // 3.1.1's "never" is this edition's own ceiling, not a request cut.
        if version == ProtocolVersion::V5 && granted_expiry_s < requested_expiry_s {
            self.tallies.session_expiry_shortened += 1;
        }
        let roomy = self.session_room(
            &client_id,
            connect.clean_start,
            granted_expiry_s,
            connect.will.as_ref(),
        );
        let granted_expiry_s = match roomy {
            Ok(expiry_s) => expiry_s,
            Err(refusal) => {
                self.turn_away(conn, &connect, &client_id, refusal, now_ms, out);
                return;
            }
        };
        // A 3.1.1 session has no expiry to be told: it is made clean.
        let clean_start =
            connect.clean_start || granted_expiry_s == 0 && version == ProtocolVersion::V311;

        let (keep_alive_s, server_keep_alive_s) = match (version, self.settings.max_keepalive_s) {
            (ProtocolVersion::V5, Some(max_s))
                if connect.keep_alive_s == 0 || connect.keep_alive_s > max_s =>
            {
                (max_s, Some(max_s))
            }
            _ => (connect.keep_alive_s, None),
        };
        let mut properties = Properties::default();
        if version == ProtocolVersion::V5 {
            let p = &mut properties;
            p.topic_alias_maximum = Some(TOPIC_ALIAS_MAXIMUM);
            p.maximum_packet_size = Some(self.settings.max_message_size_bytes);
            // Retain Available, Shared Subscription Available and Maximum
            // QoS are left out: absent, MQTT reads them as offered in full.
            if self.settings.receive_maximum != u16::MAX {
                p.receive_maximum = Some(self.settings.receive_maximum);
            }
            if requested_expiry_s != granted_expiry_s {
                p.session_expiry_interval_s = Some(granted_expiry_s);
            }
            p.server_keep_alive_s = server_keep_alive_s;
            if assigned {
                p.assigned_client_identifier = Some(client_id.clone());
            }
            admitted.connack_properties(p);
        }
        let connack = Connack {
            session_present: false,
            reason_code: ReasonCode::SUCCESS,
            properties,
        };
        // A client no CONNACK can reach is refused before its session is
        // touched, and told nothing (MQTT-3.1.2-24).
        let client_max_packet_size = connect.properties.maximum_packet_size.unwrap_or(u32::MAX);
        let Some(mut connack) = fitted_connack(connack, version, client_max_packet_size) else {
            limited!(
                CONNECT_REFUSED,
                now_ms,
                "refusing CONNECT from client id {client_id:?}: its Maximum Packet Size of {client_max_packet_size} bytes is smaller than the CONNACK it must be sent"
            );
            let named = (client_id.as_str(), connect.username.as_deref());
            let why = Reason::Code(ReasonCode::PACKET_TOO_LARGE);
            self.connection_refused(conn, Some(named), why, now_ms);
            self.close_silently(conn, now_ms, out);
            return;
        };

        let session_key =
            self.claim_session(&client_id, clean_start, granted_expiry_s, now_ms, out);
        self.remember_claimed(session_key);
        let session = self.sessions.get_mut(session_key).expect("claimed above");
        connack.session_present = !session.is_new;
        let made = session.is_new;
        session.is_new = false;
        session.set_expires_at_ms(None);
        session.expiry_interval_s = granted_expiry_s;
        // A Will waiting from the previous connection is cancelled by this one.
        if session.pending_will.take().is_some() {
            self.tallies.wills_cancelled += 1;
        }

        let properties = &connect.properties;
        let active = Active {
            version,
            session: session_key,
            keep_alive_s,
            client_max_packet_size,
            client_receive_maximum: properties.receive_maximum.unwrap_or(u16::MAX),
            topic_aliases: Default::default(),
            problem_information: properties.request_problem_information != Some(0),
            clean_start: connect.clean_start,
            connect_expiry_s: granted_expiry_s,
            will: connect.will.map(Box::new),
            pubacks: Default::default(),
        };
        let connection = self
            .connections
            .get_mut(conn)
            .expect("the caller checked the connection");
        connection.active = Some(active);

        self.hold_grants(session_key, admitted);
        // A session that keeps a record is answered once it is stored.
        // The admitted name - a verified certificate's wins over whatever
        // the CONNECT says - which the acl_file's grants are compiled for
        // again after a restart.
        let connection = self.connections.get(conn).expect("checked above");
        let user_name = connection.user.clone();
        if let (Some(name), Some(_)) = (&user_name, connection.origin.certificate_user()) {
            log::info!("client {client_id} is user {name:?}, named by its certificate");
        }
        if let Some(connack) = self.connack_after_write(
            conn,
            session_key,
            connack,
            made,
            user_name.as_deref(),
            now_ms,
            out,
        ) {
            self.complete_connect(conn, session_key, connack, now_ms, out);
        }
    }

    /// Answers a CONNECT whose session is settled: the connection owns the
    /// session from its CONNACK on.
    pub(crate) fn complete_connect(
        &mut self,
        conn: Key,
        session_key: Key,
        connack: Connack,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let (version, max_bytes) = (active.version, active.client_max_packet_size);
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        session.connection = Some(conn);
        let client_id = Rc::clone(&session.client_id);
        let session_present = connack.session_present;
        // Fitted at the CONNECT; only a store's late word on the expiry
        // can have grown it since.
        if !self.send_within(conn, version, max_bytes, &Packet::Connack(connack), out) {
            return;
        }
        // Where the door learnt it: the client a proxy speaks for, or a
        // Unix socket's peer.
        let from = self
            .source(conn)
            .map_or_else(String::new, |source| format!(" from {source}"));
        if let Some(connection) = self.connections.get(conn) {
            let user = connection.user.as_ref();
            crate::logging::connected(&client_id, user, connection.origin.source());
        }
        log::info!(
            "client {client_id} connected{from} (MQTT {}, session present: {session_present})",
            match version {
                ProtocolVersion::V311 => "3.1.1",
                ProtocolVersion::V5 => "5",
            }
        );
        if session_present {
            // What it was owed is asked of the grants this connection holds.
            self.take_back_unreadable(session_key, true, now_ms, out);
            self.resume_latest_readers(session_key);
            self.resend_inflight(conn, session_key, now_ms, out);
        }
        self.pump(session_key, now_ms, out);
        self.drain_groups_of(session_key, now_ms, out);
        self.pump_readers_of(session_key, now_ms, out);
    }

    /// Every reason a CONNECT may be refused, in the order they are asked.
    fn admit_connect(&self, connect: &Connect) -> Result<(), Refusal> {
        let settings = &self.settings;
        if connect.protocol_version == ProtocolVersion::V311
            && settings.min_protocol_version == ProtocolVersion::V5
        {
            return Err(Refusal::OnlyMqtt5Admitted);
        }
        if connect.properties.authentication_method.is_some() {
            return Err(Refusal::NoAuthenticationMethod);
        }
        let client_id = &connect.client_id;
        if client_id.len() > settings.max_client_id_length as usize {
            return Err(Refusal::ClientIdTooLong);
        }
        if client_id.is_empty() && !connect.clean_start {
            return Err(Refusal::KeptSessionWithoutClientId);
        }
        if has_control_character(client_id) {
            return Err(Refusal::ClientIdControlCharacter);
        }
        if connect
            .username
            .as_deref()
            .is_some_and(has_control_character)
        {
            return Err(Refusal::UserNameControlCharacter);
        }
        if has_reserved_user_property(&connect.properties) {
            return Err(Refusal::ReservedConnectProperty);
        }
        if let Some(will) = &connect.will {
            self.admit_will(will)?;
        }
        Ok(())
    }

    /// A Will is held to the rules a publish to its topic would meet, since
    /// a Will that could never be delivered is better refused now.
    fn admit_will(&self, will: &Will) -> Result<(), Refusal> {
        if !topic::is_valid_topic_name(&will.topic) {
            return Err(Refusal::WillTopicNotAName);
        }
        self.admit_topic(&will.topic).map_err(Refusal::for_will)?;
        // What is defined under `$saguin/` (a seek, a queue's response, a
        // point read) answers the connection that asks; a Will fires when
        // that connection is gone, so none of them can take one.
        if will.topic.starts_with("$saguin/") {
            return Err(Refusal::WillTopicRequest);
        }
        self.admit_queue_topic(&will.topic)
            .map_err(|_| Refusal::WillTopicDeadLetter)
    }

    /// Refuses a CONNECT before its session is touched, and closes.
    fn turn_away(
        &mut self,
        conn: Key,
        connect: &Connect,
        client_id: &str,
        refusal: Refusal,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        limited!(
            CONNECT_REFUSED,
            now_ms,
            "refusing CONNECT from client id {client_id:?}: {refusal}"
        );
        let named = (client_id, connect.username.as_deref());
        self.connection_refused(conn, Some(named), refusal.into(), now_ms);
        let problem_information = connect.properties.request_problem_information != Some(0);
        let client = ConnackReader {
            version: connect.protocol_version,
            problem_information,
            max_packet_size: connect.properties.maximum_packet_size.unwrap_or(u32::MAX),
        };
        self.send_connack_refusal(conn, client, refusal.code(), refusal.reason(), out);
        self.close_silently(conn, now_ms, out);
    }

    /// A refusing CONNACK, with its Reason String where the client takes
    /// one and it fits; nothing where not even the code fits.
    pub(crate) fn send_connack_refusal(
        &mut self,
        conn: Key,
        client: ConnackReader,
        code: ReasonCode,
        reason: &str,
        out: &mut impl Transport,
    ) {
        let mut properties = Properties::default();
        if client.version == ProtocolVersion::V5 && client.problem_information {
            properties.reason_string = Some(reason.to_string());
        }
        let packet = Packet::Connack(Connack {
            session_present: false,
            reason_code: code,
            properties,
        });
        if let Some(fitted) = packet_size::fitted(&packet, client.version, client.max_packet_size) {
            out.send(conn, client.version, &fitted, false);
        }
    }

    /// Answers a CONNECT that could not be read: with the code the reading
    /// stopped on once it declared MQTT 5, with 3.1.1's "unacceptable
    /// protocol version" for a version this broker does not speak, and
    /// with nothing otherwise, since 3.1.1 has no code for the rest.
    pub(crate) fn refuse_connect(
        &mut self,
        conn: Key,
        error: DecodeError,
        connect_version: Option<ProtocolVersion>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        log::debug!("refusing an unreadable CONNECT: {error}");
        self.connection_refused(conn, Some(("", None)), Reason::Code(error.code), now_ms);
        // The CONNECT was not read, so the client's limits are not known.
        let unread = |version| ConnackReader {
            version,
            problem_information: version == ProtocolVersion::V5,
            max_packet_size: u32::MAX,
        };
        if error.code == ReasonCode::UNSUPPORTED_PROTOCOL_VERSION {
            let client = unread(ProtocolVersion::V311);
            self.send_connack_refusal(conn, client, error.code, error.reason, out);
        } else if connect_version == Some(ProtocolVersion::V5) {
            let client = unread(ProtocolVersion::V5);
            self.send_connack_refusal(conn, client, error.code, error.reason, out);
        }
        self.close_silently(conn, 0, out);
    }

    /// Finds or makes the session `client_id` connects to. A connection
    /// holding it is taken over; a Clean Start ends what was kept.
    fn claim_session(
        &mut self,
        client_id: &str,
        clean_start: bool,
        expiry_interval_s: u32,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Key {
        // Positions a new session may start from: none, unless retention
        // passed some of the session's and it starts again on the rest.
        let mut keeps_positions = false;
        if let Some(existing) = self.sessions.key_of(client_id) {
            let owner = self
                .sessions
                .get(existing)
                .and_then(|s| s.connection)
                .or_else(|| self.persist.connecting_conn(existing));
            if let Some(old_conn) = owner {
                self.take_over(old_conn, now_ms, out);
            }
            // Taking over may have ended a session that ends with its connection.
            if self.sessions.contains(existing) {
                let expired = self
                    .sessions
                    .get(existing)
                    .and_then(|s| s.expires_at_ms())
                    .is_some_and(|at| at <= now_ms);
                if clean_start || expired {
                    // A Will its closed connection left waiting is withheld
                    // by this new connection for its client id, though the
                    // session ends (MQTT-3.1.2-8; rfcs/0002, "Wills"). A
                    // resume cancels it once its claim is remembered.
                    if owner.is_none() {
                        self.cancel_waiting_will(existing, now_ms);
                    }
                    self.end_session(existing, now_ms, out);
                } else if self.below_floor(existing) {
                    // Retention took records this session had not read:
                    // it is told Session Present 0 rather than served a gap,
                    // and only the positions retention passed are dropped.
                    log::warn!("client {client_id}: a channel position fell below its floor; the session starts again");
                    self.record_session_losses(existing, now_ms);
                    self.drop_positions_below_floor(existing, out);
                    self.end_session_keeping_positions(existing, now_ms, out);
                    keeps_positions = true;
                } else {
                    return existing;
                }
            }
        }
        // Whatever held the client id before was ended above. What its
        // client id still has stored is a lost session's (sessions kept in
        // memory, channels on disk, and a crash between), never this one's.
        let session_key = self
            .sessions
            .insert(Session::new(client_id, expiry_interval_s));
        if expiry_interval_s > 0 && !keeps_positions {
            self.drop_stored_positions(session_key, out);
        }
        session_key
    }

    /// Disconnects the connection that held a session another CONNECT now
    /// claims. Its Will is treated as at any other end of a connection: one
    /// without a delay goes out now, and one with a delay waits on the
    /// session, so it goes out if the session ends - with the connection,
    /// or at this CONNECT's Clean Start - and is cancelled if this CONNECT
    /// resumes it (rfcs/0002, "Wills").
    fn take_over(&mut self, old_conn: Key, now_ms: u64, out: &mut impl Transport) {
        let reason = Refusal::SessionTakenOver;
        self.end_connection(old_conn, Some(reason), true, now_ms, out);
    }

    /// Cancels the Will a session's last connection left waiting, unless its
    /// delay or the session's expiry ran out before this moment (then the
    /// tick that publishes it is only late).
    fn cancel_waiting_will(&mut self, session_key: Key, now_ms: u64) {
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        let session_lives = session.expires_at_ms().is_none_or(|at| at > now_ms);
        let will_waits = session
            .pending_will
            .as_ref()
            .is_some_and(|waiting| waiting.1 > now_ms);
        if session_lives && will_waits {
            session.pending_will = None;
            self.tallies.wills_cancelled += 1;
        }
    }

    /// Sends again what a resumed session had on the wire: PUBLISH with DUP
    /// where no answer came, PUBREL where PUBREC came and PUBCOMP did not.
    fn resend_inflight(
        &mut self,
        conn: Key,
        session_key: Key,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let now_unix_ms = self.unix_ms(now_ms);
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let (version, max_bytes) = (active.version, active.client_max_packet_size);
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let mut too_large = Vec::new();
        for (&packet_id, inflight) in &session.inflight {
            if self.persist.log.held_for_window(session_key, packet_id) {
                // Never sent: it goes once its window is stored.
                continue;
            }
            let packet = match inflight.stage {
                OutboundStage::Published => {
                    let delivery = &inflight.delivery;
                    let left_s = delivery.remaining_expiry_s(now_unix_ms).ok().flatten();
                    let mut publish =
                        crate::core::message::outgoing_publish(delivery, Some(packet_id), left_s);
                    publish.dup = true;
                    Packet::Publish(publish)
                }
                OutboundStage::Released => Packet::Pubrel(PubAck {
                    packet_id,
                    ..PubAck::default()
                }),
            };
            match packet_size::fitted(&packet, version, max_bytes) {
                Some(fitted) => {
                    out.send(conn, version, &fitted, false);
                }
                None => too_large.push(packet_id),
            }
        }
        // A client back with a smaller Maximum Packet Size: what no longer
        // fits is discarded as though sent (MQTT-3.1.2-25), once the rest
        // is on the wire.
        for packet_id in too_large {
            self.stats.deliveries_too_large += 1;
            self.outbound_finished(session_key, packet_id, now_ms, out);
        }
    }

    pub(crate) fn handle_disconnect(
        &mut self,
        conn: Key,
        disconnect: Disconnect,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        if let Some(expiry_s) = disconnect.properties.session_expiry_interval_s {
            if active.connect_expiry_s == 0 && expiry_s != 0 {
                // MQTT forbids reviving a session its CONNECT said ends.
                let reason = Refusal::ExpiryRevived;
                self.end_connection(conn, Some(reason), true, now_ms, out);
                return;
            }
            let granted_s = expiry_s.min(self.settings.max_session_expiry_s);
            if let Some(session) = self.sessions.get_mut(active.session) {
                session.expiry_interval_s = granted_s;
            }
        }
        // Its channel positions are stored first, then its record, and
        // only then is the connection closed.
        if self.positions_before_close(conn, &disconnect, out) {
            return;
        }
        if self.disconnect_after_write(conn, &disconnect, now_ms, out) {
            return;
        }
        let publish_will = disconnect.reason_code == ReasonCode::DISCONNECT_WITH_WILL;
        self.end_connection(conn, None, publish_will, now_ms, out);
    }

    /// Parts a session from the connection that ended: it is kept for its
    /// expiry, or ended now, and the connection's Will is published, held
    /// for its delay, or dropped.
    pub(crate) fn detach_session(
        &mut self,
        active: Active,
        publish_will: bool,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let session_key = active.session;
        let will = if publish_will {
            active.will.map(|w| *w)
        } else {
            None
        };
        // A worker's jobs go back before anything else happens to its session.
        self.queue_connection_ended(session_key);
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        session.connection = None;
        let client_id = Rc::clone(&session.client_id);
        log::info!("client {client_id} disconnected");
        if session.expiry_interval_s == 0 {
            if let Some(will) = will {
                self.tallies.will_published(WillCause::Immediate);
                self.publish_will(will, client_id, now_ms, out);
            }
            self.end_session(session_key, now_ms, out);
            return;
        }
        session.set_expires_at_ms(match session.expiry_interval_s {
            u32::MAX => None,
            expiry_s => Some(now_ms + u64::from(expiry_s) * 1000),
        });
        // A disconnect stores where the session's readers have reached.
        self.commit_positions(Some(session_key), out);
        self.latest_readers_away(session_key);
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        if let Some(will) = will {
            match will.properties.will_delay_interval_s.unwrap_or(0) {
                0 => {
                    self.tallies.will_published(WillCause::Immediate);
                    self.publish_will(will, client_id, now_ms, out)
                }
                // A delay longer than the session is cut short by its end,
                // which publishes a waiting Will first.
                delay_s => {
                    session.pending_will =
                        Some(Box::new((will, now_ms + u64::from(delay_s) * 1000)))
                }
            }
        }
        // The disconnect moment, and any Will's due moment, are stored.
        self.save_session(session_key, now_ms, out);
    }

    /// Ends a session, keeping the stored positions of its readers for the
    /// session that replaces it.
    fn end_session_keeping_positions(
        &mut self,
        session_key: Key,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if let Some(session) = self.sessions.get_mut(session_key) {
            session.keep_positions = true;
        }
        self.end_session(session_key, now_ms, out);
    }

    /// Ends a session whole: its Will first, then its subscriptions and
    /// group memberships, what it was owed and what it held.
    pub(crate) fn end_session(&mut self, session_key: Key, now_ms: u64, out: &mut impl Transport) {
        self.queue_session_ended(session_key);
        let Some(mut session) = self.sessions.remove(session_key) else {
            return;
        };
        if let Some((will, _)) = session.pending_will.take().map(|b| *b) {
            self.tallies.will_published(WillCause::SessionEnded);
            self.publish_will(will, Rc::clone(&session.client_id), now_ms, out);
        }
        for (filter, entry) in &session.subscriptions {
            match entry.group {
                Some(group) => self.leave_group(group, session_key),
                None => {
                    self.index.remove(filter, Target::Session(session_key));
                }
            }
        }
        self.stats.qos2_abandoned += session.held_publishes.len() as u64;
        let drops = session
            .held_publishes
            .iter()
            .filter_map(|(&packet_id, held)| {
                self.hold_drop_for(&session, packet_id, &held.message.topic)
            })
            .collect();
        self.holds_dropped(drops, out);
        let drop_positions = session.expiry_interval_s > 0 && !session.keep_positions;
        let owner = (&session.client_id, session.epoch);
        self.drop_readers(session_key, owner, drop_positions, out);
        // What a shared group handed this session and it did not finish
        // goes back to the group.
        // Each with whether it went on the wire.
        let traffic = session.take_traffic();
        let unfinished: Vec<(Delivery, bool)> = traffic
            .inflight
            .into_values()
            .filter(|f| f.stage == OutboundStage::Published)
            .map(|f| (f.delivery, true))
            .chain(traffic.waiting.into_iter().map(|d| (d, false)))
            .filter(|(d, _)| d.group.is_some())
            .collect();
        self.return_to_groups(unfinished, now_ms, out);
        self.session_record_ended(&session.client_id, out);
        self.forget_grants(&session.client_id);
    }

    /// Ends sessions whose expiry has passed and publishes Wills whose delay
    /// has.
    pub(crate) fn expire_sessions(&mut self, now_ms: u64, out: &mut impl Transport) {
        let mut expired = Vec::new();
        let mut due_wills = Vec::new();
        for (key, session) in self.sessions.iter() {
            if session.connection.is_none()
                && session.expires_at_ms().is_some_and(|at| at <= now_ms)
            {
                expired.push(key);
            } else if session
                .pending_will
                .as_ref()
                .is_some_and(|pending| pending.1 <= now_ms)
            {
                due_wills.push(key);
            }
        }
        for key in due_wills {
            if let Some(session) = self.sessions.get_mut(key) {
                if let Some((will, _)) = session.pending_will.take().map(|b| *b) {
                    let client_id = Rc::clone(&session.client_id);
                    self.tallies.will_published(WillCause::Delayed);
                    self.publish_will(will, client_id, now_ms, out);
                    // Published first, then taken off the record.
                    self.save_session(key, now_ms, out);
                }
            }
        }
        for key in expired {
            log::info!(
                "session {} expired",
                self.sessions.get(key).map(|s| &*s.client_id).unwrap_or("-")
            );
            self.end_session(key, now_ms, out);
        }
    }

    /// A Will goes through the same path as any publish, as published by
    /// the client that armed it. One the retained store has no room for is
    /// logged: nobody is left to tell.
    pub(crate) fn publish_will(
        &mut self,
        will: Will,
        client_id: Rc<str>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if !self.may_publish_will(&client_id, &will.topic) {
            log::warn!(
                "the Will of {client_id} was not published: its roles no longer allow a publish to {:?}",
                will.topic
            );
            return;
        }
        let mut properties = will.properties;
        properties.will_delay_interval_s = None;
        properties
            .user_properties
            .retain(|(name, _)| !name.starts_with("saguin-") || name == "saguin-id");
        let message = Message {
            topic: will.topic.into(),
            payload: will.payload,
            qos: will.qos,
            retain: will.retain,
            properties: shared_properties(properties),
            received_at_unix_ms: self.unix_ms(now_ms),
            publisher: Some(Rc::clone(&client_id)),
        };
        let result = match self.channel_for(&message.topic) {
            Some(_) if self.admit_queue_topic(&message.topic).is_err() => {
                Err("a dead-letter channel takes records only from its queue")
            }
            Some(channel) => self
                .store_publish(channel, message, None, now_ms, out)
                .map_err(|_| "storage is behind"),
            // Logged first where a durable session is owed it.
            None => match self.log_before_route(None, None, message, now_ms, out) {
                None => Ok(()),
                Some(message) => self
                    .accept_message(message, now_ms, out)
                    .map_err(Refusal::reason),
            },
        };
        if let Err(reason) = result {
            log::warn!("the Will of {client_id} was not published: {reason}");
        }
    }
}
