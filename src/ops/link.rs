//! What joins the operations thread to the broker's executor thread.
//!
//! The broker's tables live on the executor thread and are touched by no
//! other, so the operations thread asks for what it needs over a bounded
//! channel and the executor answers by copying numbers ([`answer`]). An
//! answer that does not come within [`ASK_TIMEOUT_MS`] is a broker that
//! cannot serve, and the route says so rather than waiting.

use std::sync::Arc;
use std::time::Duration;

use smol::channel::{Receiver, Sender};

use crate::core::observe::{
    ChannelConsumers, LossesView, Observation, QueueView, RefusedView, SessionsView,
};
use crate::core::Broker;
use crate::store::{Backups, ChannelBytesReply, CommitStats, Failure};

/// Questions waiting for the executor at once; one more is answered 503.
pub const ASK_QUEUE: usize = 8;
/// How long a route waits for the executor's answer.
pub const ASK_TIMEOUT_MS: u64 = 5_000;

/// One question for the executor thread, with where to put the answer.
pub enum Ask {
    Observe(Sender<Scrape>),
    Consumers {
        max_rows: usize,
        reply: Sender<Vec<ChannelConsumers>>,
    },
    Sessions {
        max_rows: usize,
        reply: Sender<SessionsView>,
    },
    Losses {
        max_rows: usize,
        reply: Sender<LossesView>,
    },
    Refused {
        max_rows: usize,
        reply: Sender<RefusedView>,
    },
    /// The acl_file's answer for a user, as JSON.
    Acl {
        user: String,
        client_id: Option<String>,
        reply: Sender<String>,
    },
    /// Who may connect, as the broker holds it now.
    Authentication(Sender<Arc<crate::auth::Authentication>>),
    /// `None` in the answer: no queue has that name.
    Queue {
        name: String,
        max_rows: usize,
        reply: Sender<Option<QueueView>>,
    },
}

/// What the executor copies out for one scrape.
pub struct Scrape {
    pub observation: Observation,
    pub bridges: Vec<BridgeObservation>,
}

/// One bridge as the catalogue reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeObservation {
    pub name: String,
    /// `tcp://host:port` or `tls://host:port`.
    pub peer: String,
    pub connected: bool,
    pub stats: crate::bridge::link::Stats,
}

/// Answers `ask` from the broker's tables and `bridges`' counters: the
/// bounded copy the executor pays for a route. A caller that gave up is
/// not waited for. `now_ms` is the core's clock.
pub fn answer(
    ask: Ask,
    broker: &Broker,
    bridges: &dyn Fn() -> Vec<BridgeObservation>,
    now_ms: u64,
) {
    match ask {
        Ask::Observe(reply) => {
            let _ = reply.try_send(Scrape {
                observation: broker.observe(),
                bridges: bridges(),
            });
        }
        Ask::Consumers { max_rows, reply } => {
            let _ = reply.try_send(broker.consumers_view(max_rows));
        }
        Ask::Sessions { max_rows, reply } => {
            let _ = reply.try_send(broker.sessions_view(max_rows));
        }
        Ask::Losses { max_rows, reply } => {
            let _ = reply.try_send(broker.losses_view(max_rows));
        }
        Ask::Authentication(reply) => {
            let _ = reply.try_send(broker.authentication().clone());
        }
        Ask::Refused { max_rows, reply } => {
            let _ = reply.try_send(broker.refused_view(max_rows));
        }
        Ask::Acl {
            user,
            client_id,
            reply,
        } => {
            let _ = reply.try_send(broker.acl_view(&user, client_id.as_deref()));
        }
        Ask::Queue {
            name,
            max_rows,
            reply,
        } => {
            let _ = reply.try_send(broker.queue_view(&name, max_rows, now_ms));
        }
    }
}

/// A storage provider as the catalogue names it.
#[derive(Clone)]
pub struct Provider {
    pub name: String,
    /// `redb` or `memory`.
    pub kind: &'static str,
    /// Its `max_bytes`.
    pub max_bytes: u64,
    /// The provider's `publish_commit_max_records`, for a provider that
    /// collects publishes; `None` for one that does not.
    pub publish_commit_max_records: Option<u32>,
    /// Its storage thread's counters, read without the executor.
    pub commits: Arc<dyn Fn() -> CommitStats + Send + Sync>,
    /// Asks its storage thread for each channel's record bytes; false when
    /// the thread's queue is full or it has stopped.
    pub channel_bytes: Arc<dyn Fn(ChannelBytesReply) -> bool + Send + Sync>,
    /// What its storage thread has caused to be written to the device, as
    /// the kernel counts it; `None` where `/proc` does not say.
    pub written_bytes: Arc<dyn Fn() -> Option<u64> + Send + Sync>,
    /// Its `device_endurance`, in bytes.
    pub device_endurance_bytes: Option<u64>,
    /// Why it takes no more writes, once its device failed it: what
    /// `/health` names.
    pub failure: Arc<dyn Fn() -> Option<Arc<Failure>> + Send + Sync>,
}

impl Provider {
    /// Each channel's record bytes, as the storage thread last committed
    /// them; `None` when it does not answer within [`ASK_TIMEOUT_MS`].
    pub async fn ask_channel_bytes(&self) -> Option<Vec<(String, u64)>> {
        let (reply, answer) = smol::channel::bounded(1);
        let asked = (self.channel_bytes)(Box::new(move |bytes| {
            let _ = reply.try_send(bytes);
        }));
        if !asked {
            return None;
        }
        smol::future::or(async { answer.recv().await.ok() }, async {
            smol::Timer::after(Duration::from_millis(ASK_TIMEOUT_MS)).await;
            None
        })
        .await
    }
}

/// Everything the operations thread holds of the broker.
#[derive(Clone)]
pub struct Link {
    pub asks: Sender<Ask>,
    /// Whether restarting the process would help: `false` when the
    /// executor has stopped turning or a storage thread has stopped.
    pub healthy: Arc<dyn Fn() -> bool + Send + Sync>,
    pub providers: Vec<Provider>,
    pub broker_id: String,
    /// Each MQTT door's name and whether it asks for a client
    /// certificate (`required`, `accepted` or `none`), in door order.
    pub mqtt_doors: Vec<(String, &'static str)>,
    /// The redb providers an online backup copies, asked without the
    /// executor.
    pub backups: Backups,
}

impl Link {
    /// A link and the receiver the executor answers from.
    pub fn new(
        broker_id: String,
        healthy: Arc<dyn Fn() -> bool + Send + Sync>,
        providers: Vec<Provider>,
    ) -> (Link, Receiver<Ask>) {
        let (asks, receiver) = smol::channel::bounded(ASK_QUEUE);
        let link = Link {
            asks,
            healthy,
            providers,
            broker_id,
            mqtt_doors: Vec::new(),
            backups: Backups::default(),
        };
        (link, receiver)
    }

    /// Sends the question `make` builds and waits for its answer; `None`
    /// when the executor is too busy to queue it or to answer in time.
    pub async fn ask<T>(&self, make: impl FnOnce(Sender<T>) -> Ask) -> Option<T> {
        let (reply, answer) = smol::channel::bounded(1);
        self.asks.try_send(make(reply)).ok()?;
        smol::future::or(async { answer.recv().await.ok() }, async {
            smol::Timer::after(Duration::from_millis(ASK_TIMEOUT_MS)).await;
            None
        })
        .await
    }
}
