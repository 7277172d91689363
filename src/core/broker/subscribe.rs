//! SUBSCRIBE and UNSUBSCRIBE.

use crate::core::refusal::Refusal;
use std::rc::Rc;

use crate::codec::{
    topic, Packet, Properties, QoS, ReasonCode, RetainHandling, Suback, Subscribe,
    SubscriptionOptions, Unsuback, Unsubscribe,
};
use crate::core::broadcast::shared::Member;
use crate::core::broadcast::topic_index::{Subscriber, Target};
use crate::core::channel::ReaderFilter;
use crate::core::message::Delivery;
use crate::core::partition::{self, Slice};
use crate::core::session::SubscriptionEntry;
use crate::core::{Broker, Key, Transport};
use crate::log_limit::{limited, LogLimit};

/// The `saguin-` User Properties a SUBSCRIBE may carry: they ask something
/// of a channel, and a broadcast topic has nothing to give them.
const READ_ON_SUBSCRIBE: [&str; 2] = ["saguin-filter", "saguin-deletions"];

/// One SUBSCRIBE may carry thousands of filters a rule refuses: a line
/// each would let one packet write megabytes of log.
pub(crate) static SUBSCRIPTION_REFUSED: LogLimit =
    LogLimit::new("refusing a subscription", log::Level::Warn, 10, 10_000);

/// What a filter asks for once its form is understood.
#[derive(Clone, Copy)]
pub(crate) enum Form<'a> {
    Plain(&'a str),
    Shared {
        share_name: &'a str,
        filter: &'a str,
    },
}

impl Broker {
    pub(crate) fn handle_subscribe(
        &mut self,
        conn: Key,
        mut subscribe: Subscribe,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        if let Some(breach) = self.restrict_subscribe(conn, &mut subscribe) {
            self.end_connection(conn, Some(breach), true, now_ms, out);
            return;
        }
        // No Local on a shared subscription is a protocol error, not a
        // refusal (MQTT-3.8.3-4).
        let shared_no_local = subscribe
            .filters
            .iter()
            .any(|(filter, options)| options.no_local && filter.starts_with("$share/"));
        if shared_no_local {
            let reason = Refusal::SharedNoLocal;
            self.end_connection(conn, Some(reason), true, now_ms, out);
            return;
        }
        // Filters are session memory, bounded for every client alike.
        // (Served again after its record's write, it was checked already.)
        if !self.persist.writes_through && !self.room_for_filters(session_key, &subscribe) {
            self.refuse_subscribe(conn, &subscribe, crate::core::Written::Full, out);
            return;
        }
        // A session that keeps a record has it written first.
        if self.subscribe_after_write(conn, &subscribe, now_ms, out) {
            return;
        }
        let (packet_refusal, slice) = packet_reading(&subscribe);

        let subscription_id = subscribe
            .properties
            .subscription_identifiers
            .first()
            .copied();
        let mut reason_codes = Vec::with_capacity(subscribe.filters.len());
        let mut first_refusal = None;
        let mut retained_passes = Vec::new();
        for (filter, options) in &subscribe.filters {
            let refusal = filter_refusal(packet_refusal, slice.as_deref(), filter);
            let queue_answer = match refusal {
                Some(_) => None,
                None => self.subscribe_queue(conn, session_key, filter, *options),
            };
            if let Some(answer) = queue_answer {
                let code = answer.unwrap_or_else(|refusal| {
                    limited!(
                        SUBSCRIPTION_REFUSED,
                        now_ms,
                        "refusing a subscription to {filter:?} from {}: {refusal}",
                        self.client_id_of(conn)
                    );
                    self.stats.subscriptions_refused.count(refusal);
                    first_refusal.get_or_insert(refusal.reason());
                    refusal.code()
                });
                reason_codes.push(code);
                continue;
            }
            let admitted = match refusal {
                Some(refusal) => Err(refusal),
                None => self.admit_filter(session_key, filter),
            };
            let code = match admitted {
                Ok(form) => {
                    let existed = self.subscribe_one(
                        session_key,
                        filter,
                        form,
                        *options,
                        subscription_id,
                        slice.clone(),
                    );
                    if let Form::Plain(filter) = form {
                        self.warn_of_differing_counts(session_key, filter, slice.as_deref());
                        // Every filter is recorded before any channel replays.
                        let entry = ReaderFilter {
                            filter: filter.into(),
                            options: SubscriptionOptions {
                                qos: options.qos.min(QoS::ExactlyOnce),
                                ..*options
                            },
                            subscription_id,
                            slice: slice.clone(),
                            names_channel: false,
                        };
                        self.subscribe_channels(session_key, entry, out);
                        let wanted = match options.retain_handling {
                            RetainHandling::SendAlways => true,
                            RetainHandling::SendIfNew => !existed,
                            RetainHandling::DoNotSend => false,
                        };
                        if wanted {
                            retained_passes.push((filter.to_string(), *options));
                        }
                    }
                    ReasonCode(options.qos.min(QoS::ExactlyOnce) as u8)
                }
                Err(refusal) => {
                    limited!(
                        SUBSCRIPTION_REFUSED,
                        now_ms,
                        "refusing a subscription to {filter:?} from {}: {refusal}",
                        self.client_id_of(conn)
                    );
                    self.stats.subscriptions_refused.count(refusal);
                    first_refusal.get_or_insert(refusal.reason());
                    refusal.code()
                }
            };
            reason_codes.push(code);
        }
        let reason_string = first_refusal.and_then(|reason| self.reason_string(conn, reason));
        let suback = Suback {
            packet_id: subscribe.packet_id,
            properties: Properties {
                reason_string,
                ..Properties::default()
            },
            reason_codes,
        };
        self.send(conn, &Packet::Suback(suback), out);
        // Retained values follow the SUBACK, flagged as retained.
        let deletions = subscribe
            .properties
            .user_properties
            .iter()
            .any(|(name, _)| name == "saguin-deletions");
        for (filter, options) in retained_passes {
            let slice = slice.as_deref();
            self.send_retained(
                session_key,
                &filter,
                options,
                subscription_id,
                slice,
                now_ms,
                out,
            );
            self.latest_state_pass(session_key, &filter, deletions);
        }
        self.drain_groups_of(session_key, now_ms, out);
        self.pump_readers_of(session_key, now_ms, out);
        self.offer_to_worker(session_key, now_ms, out);
    }

    pub(crate) fn session_of(&self, conn: Key) -> Option<Key> {
        self.connections
            .get(conn)?
            .active
            .as_ref()
            .map(|a| a.session)
    }

    /// Whether a filter may be subscribed, and in which form. A filter that
    /// is no filter at all ends its connection in the codec; the form checks
    /// here answer a 3.1.1 `$share/` filter, which only this broker reads as
    /// shared, and a filter read back from a session record.
    pub(crate) fn admit_filter<'a>(
        &self,
        session_key: Key,
        filter: &'a str,
    ) -> Result<Form<'a>, Refusal> {
        let form = if filter.starts_with("$share/") {
            match topic::parse_shared(filter) {
                Some(Ok(shared)) => Form::Shared {
                    share_name: shared.share_name,
                    filter: shared.filter,
                },
                _ => return Err(Refusal::ShareMalformed),
            }
        } else if filter.len() >= 6 && filter[..6].eq_ignore_ascii_case("$share") {
            return Err(Refusal::ShareCase);
        } else {
            Form::Plain(filter)
        };
        let inner = match form {
            Form::Plain(f) | Form::Shared { filter: f, .. } => f,
        };
        if !topic::is_valid_topic_filter(inner) {
            return Err(Refusal::WildcardPartLevel);
        }
        if topic::level_count(inner) > self.settings.max_topic_levels as usize {
            return Err(Refusal::FilterTooDeep);
        }
        if inner == "$SYS" || inner.starts_with("$SYS/") {
            return Err(Refusal::FilterSysTree);
        }
        let reserved = inner == "$saguin" || inner.starts_with("$saguin/");
        if reserved && matches!(form, Form::Shared { .. }) {
            return Err(Refusal::FilterReservedShared);
        }
        let seek_reply = inner
            .strip_suffix("/reply")
            .and_then(crate::core::channel::append::seek::seek_channel)
            .is_some();
        if reserved && !seek_reply {
            return Err(Refusal::FilterReserved);
        }
        if matches!(form, Form::Shared { .. }) && self.denies_share(session_key) {
            return Err(Refusal::ShareNotAllowed);
        }
        let session = self
            .sessions
            .get(session_key)
            .expect("an active connection's session");
        let is_new = !session.subscriptions.contains_key(filter);
        if is_new && session.subscriptions.len() >= self.settings.max_subscriptions as usize {
            return Err(Refusal::TooManySubscriptions);
        }
        // Each group may hold a backlog of session_queue_bytes, so a new
        // one past the bound is refused; joining a group held is not.
        if let Form::Shared { share_name, filter } = form {
            if !self.groups.contains(share_name, filter)
                && self.groups.len() >= self.settings.max_shared_groups as usize
            {
                return Err(Refusal::TooManySharedGroups);
            }
        }
        self.authorize_filter(session_key, inner)?;
        Ok(form)
    }

    /// Adds or replaces one subscription. Returns whether the session
    /// already held this filter.
    pub(crate) fn subscribe_one(
        &mut self,
        session_key: Key,
        filter: &str,
        form: Form<'_>,
        options: SubscriptionOptions,
        subscription_id: Option<u32>,
        slice: Option<Rc<Slice>>,
    ) -> bool {
        let options = SubscriptionOptions {
            qos: options.qos.min(QoS::ExactlyOnce),
            ..options
        };
        let group = match form {
            Form::Plain(plain) => {
                let subscriber = Subscriber {
                    target: Target::Session(session_key),
                    options,
                    subscription_id,
                    slice: slice.clone(),
                };
                self.index.insert(plain, subscriber);
                None
            }
            Form::Shared { share_name, filter } => {
                let member = Member {
                    session: session_key,
                    options,
                    subscription_id,
                };
                Some(self.join_group(share_name, filter, member))
            }
        };
        let session = self
            .sessions
            .get_mut(session_key)
            .expect("an active connection's session");
        let entry = SubscriptionEntry {
            options,
            subscription_id,
            group,
            slice,
        };
        let existed = session.subscriptions.insert(filter.into(), entry).is_some();
        self.sessions.recharge(session_key);
        existed
    }

    /// Two subscribers on one filter declaring different partition counts
    /// cannot both be right, so the broker says so, naming both. Only the
    /// identical filter is compared: different filters may differ on
    /// purpose.
    fn warn_of_differing_counts(&self, session_key: Key, filter: &str, slice: Option<&Slice>) {
        let Some(slice) = slice else {
            return;
        };
        let client_of = |key: Key| self.sessions.get(key).map(|s| Rc::clone(&s.client_id));
        let Some(client_id) = client_of(session_key) else {
            return;
        };
        for other in self.index.subscribers_of(filter) {
            let Target::Session(other_key) = other.target else {
                continue;
            };
            let Some(other_slice) = other.slice.as_deref() else {
                continue;
            };
            if other_key == session_key || other_slice.partitions() == slice.partitions() {
                continue;
            }
            if let Some(other_id) = client_of(other_key) {
                log::warn!(
                    "clients {client_id:?} and {other_id:?} subscribe to {filter:?} declaring \
                     different partition counts ({} and {}): their slices overlap and leave gaps",
                    slice.partitions(),
                    other_slice.partitions()
                );
            }
        }
    }

    /// Sends the retained values `filter` reaches (those in `slice`, when
    /// one was declared), with RETAIN set.
    #[allow(clippy::too_many_arguments)]
    fn send_retained(
        &mut self,
        session_key: Key,
        filter: &str,
        options: SubscriptionOptions,
        subscription_id: Option<u32>,
        slice: Option<&Slice>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let client_id = self
            .sessions
            .get(session_key)
            .map(|s| Rc::clone(&s.client_id));
        let values: Vec<_> = self
            .retained
            .matching(filter, self.unix_ms(now_ms))
            .filter(|m| !(options.no_local && m.publisher == client_id))
            .filter(|m| partition::admits(slice, &m.topic))
            // Asked per value, as a live delivery is: the grant checked
            // at SUBSCRIBE was for the filter, not for each topic under it.
            .filter(|m| self.may_read(session_key, &m.topic))
            // A value kept before a `latest` channel claimed its topic was
            // moved into the channel at start; one the channel had no room
            // for is not served beside the channel's values.
            .filter(|m| {
                self.channel_for(&m.topic)
                    .is_none_or(|c| self.channels[c].latest.is_none())
            })
            .cloned()
            .collect();
        for message in values {
            let delivery = Delivery {
                qos: message.qos.min(options.qos),
                retain: true,
                subscription_ids: subscription_id.into_iter().collect(),
                group: None,
                reader: None,
                latest: None,
                message,
            };
            self.deliver(session_key, delivery, now_ms, out);
        }
    }

    pub(crate) fn handle_unsubscribe(
        &mut self,
        conn: Key,
        unsubscribe: Unsubscribe,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        if self.unsubscribe_after_write(conn, &unsubscribe, now_ms, out) {
            return;
        }
        let mut reason_codes = Vec::with_capacity(unsubscribe.filters.len());
        for filter in &unsubscribe.filters {
            let session = self
                .sessions
                .get_mut(session_key)
                .expect("an active connection's session");
            let code = match session.subscriptions.remove(filter.as_str()) {
                None => ReasonCode::NO_SUBSCRIPTION_EXISTED,
                Some(entry) => {
                    match entry.group {
                        Some(group) => self.leave_group(group, session_key),
                        None => {
                            self.index.remove(filter, Target::Session(session_key));
                            self.unsubscribe_channels(session_key, filter, out);
                            self.queue_unsubscribed(session_key, filter);
                        }
                    }
                    ReasonCode::SUCCESS
                }
            };
            reason_codes.push(code);
        }
        self.sessions.recharge(session_key);
        // The unsubscribe happens whatever it carries; a `saguin-` property
        // the broker does not read is named back to a client that asked
        // for problem information.
        let mut properties = Properties::default();
        let unread = unsubscribe
            .properties
            .user_properties
            .iter()
            .find(|(name, _)| name.starts_with("saguin-"));
        if let Some((name, _)) = unread {
            log::warn!(
                "{} sent an UNSUBSCRIBE with {name}, which this broker does not read",
                self.client_id_of(conn)
            );
            if self.reason_string(conn, "").is_some() {
                // The client's own name is not echoed: what the broker
                // writes under the prefix is only its own.
                let note =
                    "the UNSUBSCRIBE carried a saguin- User Property this broker does not read";
                properties
                    .user_properties
                    .push(("saguin-unread".into(), note.into()));
            }
        }
        let unsuback = Unsuback {
            packet_id: unsubscribe.packet_id,
            properties,
            reason_codes,
        };
        self.send(conn, &Packet::Unsuback(unsuback), out);
    }
}

/// What a SUBSCRIBE's User Properties say for all its filters: a refusal
/// every filter gets (a `saguin-` property the broker does not read, or a
/// malformed declaration), and the slice it declared.
pub(crate) fn packet_reading(subscribe: &Subscribe) -> (Option<Refusal>, Option<Rc<Slice>>) {
    let properties = &subscribe.properties.user_properties;
    let unread = properties.iter().any(|(name, _)| {
        name.starts_with("saguin-") && !READ_ON_SUBSCRIBE.contains(&name.as_str())
    });
    if unread {
        return (Some(Refusal::ReservedSubscribeProperty), None);
    }
    match partition::declared(properties) {
        Ok(slice) => (None, slice.map(Rc::new)),
        Err(refusal) => (Some(refusal), None),
    }
}

/// The refusal one filter meets before its own checks: the packet's, or a
/// declaration on a form that already divides its stream.
pub(crate) fn filter_refusal(
    packet_refusal: Option<Refusal>,
    slice: Option<&Slice>,
    filter: &str,
) -> Option<Refusal> {
    packet_refusal.or_else(|| slice.and_then(|_| partition::refused_on(filter)))
}
