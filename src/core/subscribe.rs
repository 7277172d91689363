//! SUBSCRIBE and UNSUBSCRIBE.

use super::session::SubscriptionEntry;
use super::topic_index::Subscriber;
use super::{Broker, Key, Transport};
use crate::codec::{
    topic, Packet, Properties, QoS, ReasonCode, Suback, Subscribe, SubscriptionOptions, Unsuback,
    Unsubscribe,
};

impl Broker {
    pub(crate) fn handle_subscribe(
        &mut self,
        conn: Key,
        subscribe: Subscribe,
        _now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session_key) = self
            .connections
            .get(conn)
            .and_then(|c| c.active.as_ref())
            .map(|a| a.session)
        else {
            return;
        };
        let subscription_id = subscribe
            .properties
            .subscription_identifiers
            .first()
            .copied();
        let mut reason_codes = Vec::with_capacity(subscribe.filters.len());
        let mut first_refusal = None;
        for (filter, options) in &subscribe.filters {
            let code = match self.admit_filter(session_key, filter) {
                Ok(()) => {
                    self.subscribe_one(session_key, filter, *options, subscription_id);
                    ReasonCode(options.qos as u8)
                }
                Err((code, reason)) => {
                    log::warn!(
                        "refusing a subscription to {filter:?} from {}: {reason}",
                        self.client_id_of(conn)
                    );
                    first_refusal.get_or_insert(reason);
                    code
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
    }

    fn admit_filter(
        &self,
        session_key: Key,
        filter: &str,
    ) -> Result<(), (ReasonCode, &'static str)> {
        if filter.starts_with("$share/") {
            return Err((
                ReasonCode::SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
                "shared subscriptions are not offered yet",
            ));
        }
        if !topic::is_valid_topic_filter(filter) {
            return Err((
                ReasonCode::TOPIC_FILTER_INVALID,
                "a wildcard takes less than a whole level",
            ));
        }
        if topic::level_count(filter) > self.settings.max_topic_levels as usize {
            return Err((
                ReasonCode::TOPIC_FILTER_INVALID,
                "filter deeper than limits.max_topic_levels",
            ));
        }
        if filter.starts_with("$saguin/") || filter == "$saguin" {
            return Err((
                ReasonCode::TOPIC_FILTER_INVALID,
                "nothing is delivered on that $saguin/ topic",
            ));
        }
        let session = self
            .sessions
            .get(session_key)
            .expect("an active connection's session");
        let is_new = !session.subscriptions.contains_key(filter);
        if is_new && session.subscriptions.len() >= self.settings.max_subscriptions as usize {
            return Err((
                ReasonCode::QUOTA_EXCEEDED,
                "more filters than limits.max_subscriptions",
            ));
        }
        Ok(())
    }

    fn subscribe_one(
        &mut self,
        session_key: Key,
        filter: &str,
        options: SubscriptionOptions,
        subscription_id: Option<u32>,
    ) {
        // Delivery is never above QoS 2, and the index keeps what was granted.
        let options = SubscriptionOptions {
            qos: options.qos.min(QoS::ExactlyOnce),
            ..options
        };
        self.index.insert(
            filter,
            Subscriber {
                session: session_key,
                options,
                subscription_id,
            },
        );
        let session = self
            .sessions
            .get_mut(session_key)
            .expect("an active connection's session");
        session.subscriptions.insert(
            filter.into(),
            SubscriptionEntry {
                options,
                subscription_id,
            },
        );
    }

    pub(crate) fn handle_unsubscribe(
        &mut self,
        conn: Key,
        unsubscribe: Unsubscribe,
        out: &mut impl Transport,
    ) {
        let Some(session_key) = self
            .connections
            .get(conn)
            .and_then(|c| c.active.as_ref())
            .map(|a| a.session)
        else {
            return;
        };
        let session = self
            .sessions
            .get_mut(session_key)
            .expect("an active connection's session");
        let mut reason_codes = Vec::with_capacity(unsubscribe.filters.len());
        for filter in &unsubscribe.filters {
            let existed = session.subscriptions.remove(filter.as_str()).is_some();
            if existed {
                self.index.remove(filter, session_key);
            }
            reason_codes.push(if existed {
                ReasonCode::SUCCESS
            } else {
                ReasonCode::NO_SUBSCRIPTION_EXISTED
            });
        }
        let unsuback = Unsuback {
            packet_id: unsubscribe.packet_id,
            properties: Properties::default(),
            reason_codes,
        };
        self.send(conn, &Packet::Unsuback(unsuback), out);
    }
}
