//! `$saguin/sessions/disconnect`: hanging another client up.
//!
//! The client id to hang up is the payload, since a client id may hold
//! `/` and a topic could not carry it back out. The PUBACK says whether the
//! request was taken; what happened comes back as one word on the Response
//! Topic, because a PUBACK may leave its reason code out and a payload
//! cannot be left out. The connection ends and its session stays: the
//! client comes back, and what it may do then is what the files say then.
//! A bridge's own sessions cannot be hung up: they are the broker's.

use crate::codec::{Packet, Properties, ProtocolVersion, Publish, QoS};
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key, Transport};

/// The topic the request is published to.
pub const HANG_UP_TOPIC: &str = "$saguin/sessions/disconnect";

impl Broker {
    /// A publish to [`HANG_UP_TOPIC`], already authorized.
    pub(crate) fn handle_hang_up(
        &mut self,
        conn: Key,
        publish: &Publish,
        slot: Option<u64>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if self.version(conn) == Some(ProtocolVersion::V311) {
            let refusal = Refusal::HangUpNeedsMqtt5;
            self.end_connection(conn, Some(refusal), true, now_ms, out);
            return;
        }
        if publish.qos == QoS::ExactlyOnce {
            // Answered on its PUBACK, as every request under $saguin/ is.
            let refusal = Refusal::RequestAtQos2;
            let (topic, id) = (&publish.topic, publish.packet_id);
            self.refuse_publish(conn, topic, publish.qos, id, None, refusal, now_ms, out);
            return;
        }
        let target = match self.hang_up_target(conn, publish) {
            Ok(target) => target,
            Err(refusal) => {
                let (topic, qos, id) = (&publish.topic, publish.qos, publish.packet_id);
                self.refuse_publish(conn, topic, qos, id, slot, refusal, now_ms, out);
                return;
            }
        };
        let (target_conn, client_id) = target;
        let answer: &[u8] = match target_conn {
            Some(target) => {
                log::info!(
                    "hanging up {client_id} at the request of {}",
                    self.client_id_of(conn)
                );
                self.end_connection(target, Some(Refusal::HungUp), true, now_ms, out);
                b"hung-up"
            }
            None => b"no-such-client",
        };
        let reply = Publish {
            qos: QoS::AtMostOnce,
            topic: publish
                .properties
                .response_topic
                .clone()
                .unwrap_or_default(),
            payload: answer.to_vec(),
            properties: Properties {
                correlation_data: publish.properties.correlation_data.clone(),
                ..Properties::default()
            },
            ..Publish::default()
        };
        self.send(conn, &Packet::Publish(reply), out);
        if let Some(slot) = slot {
            self.complete_puback(conn, slot, Ok(()), now_ms, out);
        }
    }

    /// The connection to end, if any is connected under the client id the
    /// payload names, and that id; or why the request names nobody.
    fn hang_up_target(
        &self,
        conn: Key,
        publish: &Publish,
    ) -> Result<(Option<Key>, String), Refusal> {
        if publish.properties.response_topic.is_none() {
            return Err(Refusal::HangUpWithoutResponseTopic);
        }
        let client_id = std::str::from_utf8(&publish.payload)
            .ok()
            .filter(|id| !id.is_empty())
            .ok_or(Refusal::HangUpNamesNobody)?;
        if client_id == self.client_id_of(conn) {
            return Err(Refusal::HangUpSelf);
        }
        // A bridge's sessions are the broker's own, not anybody's to hang
        // up: a name for one is answered as a name nothing is connected
        // under, and the bridge keeps its link.
        let target = self
            .sessions
            .key_of(client_id)
            .and_then(|session| self.sessions.get(session))
            .and_then(|session| session.connection)
            .filter(|&target| !self.is_bridge(target));
        Ok((target, client_id.to_string()))
    }
}
