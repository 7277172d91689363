//! Read-only views of the broker for the operations listener.
//!
//! Each view copies numbers and short strings out of the core's tables so
//! the caller can format them elsewhere: nothing here writes, and every
//! list is capped by its caller's `max_rows` with the count of what was
//! left out.

use super::Broker;
use crate::codec::ProtocolVersion;

/// The broker-wide figures of one scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub stats: super::Stats,
    /// Clients that completed a CONNECT, by protocol.
    pub connected_v311: u64,
    pub connected_v5: u64,
    /// Sessions held with no connection.
    pub sessions_offline: u64,
    /// Subscriptions every session holds.
    pub subscriptions: u64,
    pub retained_messages: u64,
    /// Exactly-once publishes received and not yet released.
    pub qos2_held: u64,
    /// QoS 1 and 2 deliveries sessions hold unacknowledged, and their cost.
    pub session_queue_messages: u64,
    pub session_queue_bytes: u64,
    /// Wills waiting out their delay.
    pub wills_waiting: u64,
    pub max_session_expiry_s: u32,
    pub qos2_max_inflight_per_client: u32,
    pub channels: Vec<ChannelObservation>,
}

/// What one channel holds, for the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelObservation {
    pub name: String,
    /// The filter as written, braces and all.
    pub filter: String,
    /// `append`, `latest` or `queue`.
    pub kind: &'static str,
    pub provider: usize,
    pub next_offset: u64,
    pub floor_offset: u64,
    /// Topics holding a current value, on a `latest` channel.
    pub latest_topics: Option<u64>,
    /// Durable consumers with a position read, and the lowest of them.
    pub consumers: u64,
    pub consumer_position_min: Option<u64>,
    pub queue: Option<QueueObservation>,
}

/// A queue's work, as the catalogue counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueObservation {
    /// Unresolved jobs.
    pub depth: u64,
    /// Jobs out with a worker now.
    pub inflight: u64,
}

/// One durable consumer's place in a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRow {
    pub client_id: String,
    pub offset: u64,
}

/// A channel's consumers, worst first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelConsumers {
    pub channel: String,
    pub next_offset: u64,
    pub consumers: u64,
    pub rows: Vec<ConsumerRow>,
}

/// One session, for `/v1/operations/sessions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub client_id: String,
    pub connected: bool,
    /// 5 or 4 (3.1.1) while connected.
    pub protocol: Option<u8>,
    pub keepalive_s: Option<u16>,
    pub expiry_interval_s: u32,
    pub subscriptions: u64,
}

/// Sessions, held ones first, capped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionsView {
    pub total: u64,
    pub connected: u64,
    pub rows: Vec<SessionRow>,
}

impl Broker {
    /// The broker-wide figures; `O(connections + sessions + channel
    /// readers)`, the price the catalogue states for a scrape.
    pub fn observe(&self) -> Observation {
        let mut o = Observation {
            stats: self.stats.clone(),
            retained_messages: self.retained.len() as u64,
            max_session_expiry_s: self.settings.max_session_expiry_s,
            qos2_max_inflight_per_client: self.settings.qos2_max_inflight_per_client,
            ..Observation::default()
        };
        for (_, connection) in self.connections.iter() {
            match connection.active.as_ref().map(|a| a.version) {
                Some(ProtocolVersion::V5) => o.connected_v5 += 1,
                Some(_) => o.connected_v311 += 1,
                None => {}
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
        }
    }

    /// Every durable consumer of channel `index` whose position is known:
    /// a session that keeps its positions, with its reader's resume point.
    fn consumer_positions(&self, index: usize) -> Vec<(&str, u64)> {
        self.channels[index]
            .readers
            .iter()
            .filter_map(|&key| self.readers.get(key))
            .filter_map(|reader| {
                let position = reader.known_position()?;
                let session = self.sessions.get(reader.session)?;
                session
                    .keep_positions
                    .then_some((&*session.client_id, position))
            })
            .collect()
    }

    /// Every channel's consumers, furthest behind first, `max_rows` each.
    pub fn consumers_view(&self, max_rows: usize) -> Vec<ChannelConsumers> {
        (0..self.channels.len())
            .filter(|&index| self.channels[index].latest.is_none())
            .filter(|&index| self.channels[index].settings.queue.is_none())
            .map(|index| {
                let mut positions = self.consumer_positions(index);
                positions.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(b.0)));
                let channel = &self.channels[index];
                ChannelConsumers {
                    channel: channel.settings.name.clone(),
                    next_offset: channel.next,
                    consumers: positions.len() as u64,
                    rows: positions
                        .into_iter()
                        .take(max_rows)
                        .map(|(client_id, offset)| ConsumerRow {
                            client_id: client_id.to_string(),
                            offset,
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
            let active = session
                .connection
                .and_then(|key| self.connections.get(key))
                .and_then(|c| c.active.as_ref());
            view.total += 1;
            view.connected += u64::from(active.is_some());
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
