//! The read-only views the operations listener asks the broker for
//! (their types are in `core::observe`), and where a reader's loss to
//! retention is recorded.

use crate::codec::ProtocolVersion;
use crate::core::observe::{
    reader_name, ChannelConsumers, ChannelObservation, ConsumerRow, Loss, LossKind, LossesView,
    Observation, PartitionRow, SessionRow, SessionsView,
};
use crate::core::observe::{RefusedClient, RefusedView};
use crate::core::refusal_counts::Reason;
use crate::core::session::Session;
use crate::core::{Broker, Key};

/// `text` cut to at most `max_bytes`, at a character boundary: a client
/// chose it, and the record outlives the connection.
fn bounded(text: &str, max_bytes: usize) -> String {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

impl Broker {
    /// Connection `conn` refused at CONNECT, or ended for breaking a rule:
    /// counted by reason, and its client recorded for
    /// `/v1/operations/refused`. `named` is the client id and user name
    /// its CONNECT gave, where the connection has no session yet.
    pub(crate) fn connection_refused(
        &mut self,
        conn: Key,
        named: Option<(&str, Option<&str>)>,
        why: Reason,
        now_ms: u64,
    ) {
        self.stats.connections_refused.count(why);
        let max_bytes = self.settings.max_topic_length as usize;
        let (client_id, user) = match named {
            Some(named) => named,
            None => match self.client_id_of(conn) {
                "-" => ("", self.user_name(conn)),
                id => (id, self.user_name(conn)),
            },
        };
        let client = RefusedClient {
            client_id: bounded(client_id, max_bytes),
            user: user.map(|user| bounded(user, max_bytes)),
            reason: why.label(),
            count: 1,
            last_seen_unix_ms: self.unix_ms(now_ms),
        };
        self.tallies.refused(client);
    }

    /// The clients refused, most refused first, `max_rows` at most.
    pub fn refused_view(&self, max_rows: usize) -> RefusedView {
        self.tallies.refused_view(max_rows)
    }

    /// What `user` (and `client_id`, for a rule written with `%c`) may do
    /// under the acl_file in force, as `saguin --acl --json` answers.
    pub fn acl_view(&self, user: &str, client_id: Option<&str>) -> String {
        match self.acl_in_force() {
            Some(acl) => crate::acl::explain::json_paragraph(acl, user, client_id)
                .trim_end()
                .to_string(),
            None => crate::acl::explain::JSON_NO_ACL.to_string(),
        }
    }

    /// Bytes an MQTT connection read and wrote, for the catalogue.
    pub fn count_wire_bytes(&mut self, received: u64, sent: u64) {
        self.stats.bytes_received += received;
        self.stats.bytes_sent += sent;
    }

    /// The broker-wide figures; `O(connections + sessions + channel
    /// readers)`, the price the catalogue states for a scrape.
    pub fn observe(&self) -> Observation {
        let mut o = Observation {
            stats: self.stats.clone(),
            retained_messages: self.retained.len() as u64,
            max_session_expiry_s: self.settings.max_session_expiry_s,
            qos2_max_inflight_per_client: self.settings.qos2_max_inflight_per_client,
            published_broadcast: self.tallies.published_broadcast,
            broadcast_unmatched: self.tallies.broadcast_unmatched,
            sessions_restored: self.tallies.sessions_restored,
            sessions_expired_while_stopped: self.tallies.sessions_expired_while_stopped,
            sessions_subscription_refused: self.tallies.sessions_subscription_refused,
            wills_published: self.tallies.wills_published,
            wills_cancelled: self.tallies.wills_cancelled,
            session_expiry_shortened: self.tallies.session_expiry_shortened,
            ..Observation::default()
        };
        for (_, connection) in self.connections.iter() {
            match connection.active.as_ref().map(|a| a.version) {
                Some(ProtocolVersion::V5) => o.connected_v5 += 1,
                Some(_) => o.connected_v311 += 1,
                None => continue,
            }
            if !connection.bridge {
                let door = connection.origin.door;
                if o.connected_by_door.len() <= door {
                    o.connected_by_door.resize(door + 1, 0);
                }
                o.connected_by_door[door] += 1;
            }
        }
        for (_, session) in self.sessions.iter() {
            o.sessions_offline += u64::from(session.connection.is_none());
            o.subscriptions += session.subscriptions.len() as u64;
            o.qos2_held += session.held_publishes.len() as u64;
            o.session_queue_messages += (session.inflight.len() + session.waiting.len()) as u64;
            o.session_queue_bytes += session.held_bytes;
            o.wills_waiting += u64::from(session.pending_will.is_some());
        }
        o.channels = (0..self.channels.len())
            .map(|index| self.observe_channel(index))
            .collect();
        o
    }

    fn observe_channel(&self, index: usize) -> ChannelObservation {
        let channel = &self.channels[index];
        let settings = &channel.settings;
        let kind = if settings.queue.is_some() {
            "queue"
        } else if channel.latest.is_some() {
            "latest"
        } else {
            "append"
        };
        let positions = self.consumer_positions(index);
        ChannelObservation {
            name: settings.name.clone(),
            filter: settings.written_filter.clone(),
            kind,
            provider: settings.provider,
            next_offset: channel.next,
            floor_offset: channel.floor,
            latest_topics: channel.latest.as_ref().map(|l| l.values.len() as u64),
            consumers: positions.len() as u64,
            consumer_position_min: positions.iter().map(|(_, offset)| *offset).min(),
            queue: self.queues.observe(index),
            retention_removed: self
                .tallies
                .retention_removed
                .get(&index)
                .copied()
                .unwrap_or(0),
            position_lost: self.tallies.position_lost.get(&index).copied().unwrap_or(0),
            published: self.tallies.published.get(index).copied().unwrap_or(0),
            latest_superseded: channel
                .latest
                .as_ref()
                .map(|_| self.tallies.latest_superseded[index]),
            partitioned_consumers: self.partitioned_consumers(index),
        }
    }

    /// Subscribers that declared a partition slice on channel `index`.
    fn partitioned_consumers(&self, index: usize) -> u64 {
        let channel = &self.channels[index];
        let sliced = channel
            .readers
            .iter()
            .filter_map(|&key| self.readers.get(key))
            .filter(|reader| reader.filters.iter().any(|f| f.slice.is_some()))
            .count();
        let sliced_latest = channel.latest.as_ref().map_or(0, |latest| {
            latest
                .readers
                .iter()
                .filter_map(|&key| self.latest_readers.get(key))
                .filter(|reader| reader.declares_slice())
                .count()
        });
        (sliced + sliced_latest) as u64
    }

    /// Every durable consumer of channel `index` whose position is known:
    /// a session that outlives its connection, at its reader's resume point.
    fn consumer_positions(&self, index: usize) -> Vec<(&Session, u64)> {
        self.channels[index]
            .readers
            .iter()
            .filter_map(|&key| self.readers.get(key))
            .filter_map(|reader| {
                let position = reader.known_position()?;
                let session = self.sessions.get(reader.session)?;
                // A position is stored only for a session that outlives
                // its connection.
                (session.expiry_interval_s > 0).then_some((session, position))
            })
            .collect()
    }

    /// When `session` was last heard from, in Unix ms: its connection's
    /// last packet while connected, when it went away otherwise; `None`
    /// for one away that never expires, whose leaving was not kept.
    fn last_seen_unix_ms(&self, session: &Session) -> Option<u64> {
        let heard_ms = match session.connection.and_then(|key| self.connections.get(key)) {
            Some(connection) => connection.heard_ms,
            None => {
                let away_ms = u64::from(session.expiry_interval_s).saturating_mul(1000);
                session.expires_at_ms()?.checked_sub(away_ms)?
            }
        };
        Some(self.unix_ms(heard_ms))
    }

    /// Every channel's consumers, furthest behind first, `max_rows` each.
    pub fn consumers_view(&self, max_rows: usize) -> Vec<ChannelConsumers> {
        (0..self.channels.len())
            .filter(|&index| self.channels[index].latest.is_none())
            .filter(|&index| self.channels[index].settings.queue.is_none())
            .map(|index| {
                let mut positions = self.consumer_positions(index);
                positions.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.client_id.cmp(&b.0.client_id)));
                let channel = &self.channels[index];
                ChannelConsumers {
                    channel: channel.settings.name.clone(),
                    next_offset: channel.next,
                    consumers: positions.len() as u64,
                    rows: positions
                        .into_iter()
                        .take(max_rows)
                        .map(|(session, offset)| ConsumerRow {
                            reader: reader_name(&session.client_id),
                            offset,
                            last_seen_unix_ms: self.last_seen_unix_ms(session),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// Sessions with nothing connected first, then by client id.
    pub fn sessions_view(&self, max_rows: usize) -> SessionsView {
        let mut view = SessionsView::default();
        let mut rows: Vec<SessionRow> = Vec::new();
        for (_, session) in self.sessions.iter() {
            let connection = session
                .connection
                .and_then(|key| self.connections.get(key))
                .filter(|c| c.active.is_some());
            let active = connection.and_then(|c| c.active.as_ref());
            view.total += 1;
            view.connected += u64::from(active.is_some());
            let partitions = session
                .subscriptions
                .iter()
                .filter_map(|(filter, entry)| {
                    let slice = entry.slice.as_ref()?;
                    Some(PartitionRow {
                        filter: filter.to_string(),
                        count: slice.partitions(),
                        indices: slice.indices().to_vec(),
                    })
                })
                .collect();
            rows.push(SessionRow {
                client_id: session.client_id.to_string(),
                connected: active.is_some(),
                protocol: active.map(|a| match a.version {
                    ProtocolVersion::V5 => 5,
                    _ => 4,
                }),
                keepalive_s: active.map(|a| a.keep_alive_s),
                expiry_interval_s: session.expiry_interval_s,
                subscriptions: session.subscriptions.len() as u64,
                remote: connection
                    .and_then(|c| c.origin.source())
                    .map(|source| source.to_string()),
                user: connection.and_then(|c| c.user.as_deref().map(str::to_string)),
                door: connection.filter(|c| !c.bridge).map(|c| c.origin.door),
                bridge: connection.is_some_and(|c| c.bridge),
                clean_start: active.map(|a| a.clean_start),
                partitions,
            });
        }
        rows.sort_by(|a, b| {
            a.connected
                .cmp(&b.connected)
                .then_with(|| a.client_id.cmp(&b.client_id))
        });
        rows.truncate(max_rows);
        view.rows = rows;
        view
    }
}

impl Broker {
    /// Readers the retention floor passed, the most lost first.
    pub fn losses_view(&self, max_rows: usize) -> LossesView {
        self.tallies.view(max_rows)
    }

    /// Records every channel position of a returning session that the
    /// floor passed; it is told with Session Present 0.
    pub(crate) fn record_session_losses(&mut self, session_key: Key, now_ms: u64) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let client_id = std::rc::Rc::clone(&session.client_id);
        let passed: Vec<(usize, u64)> = session
            .readers
            .iter()
            .filter_map(|&r| self.readers.get(r))
            .filter_map(|reader| {
                let position = reader.known_position()?;
                (position < self.channels[reader.channel].floor)
                    .then_some((reader.channel, position))
            })
            .collect();
        for (channel, position) in passed {
            self.record_loss(channel, &client_id, LossKind::Session, position, now_ms);
        }
    }

    /// Records a reader passed by the floor of channel `channel`.
    pub(crate) fn record_loss(
        &mut self,
        channel: usize,
        reader: &str,
        kind: LossKind,
        position: u64,
        now_ms: u64,
    ) {
        let ch = &self.channels[channel];
        let passing = Loss::new(
            reader,
            &ch.settings.name,
            kind,
            position,
            ch.floor,
            self.unix_ms(now_ms),
        );
        self.tallies.position_lost(passing, channel);
    }
}
