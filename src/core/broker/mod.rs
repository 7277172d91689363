//! The broker's handlers, by event: what a CONNECT, a PUBLISH, a
//! SUBSCRIBE or a session write sets in motion across the sub-machines,
//! and the driving of each sub-machine whose state lives in its own folder
//! (the broadcast log, append and latest channels, work queues).
//! Each file extends [`Broker`](crate::core::Broker); none holds state of
//! its own beyond what it hands back to the broker.

mod authenticate;
pub(crate) mod authorize;
mod broadcast_log;
mod certificate;
mod channels;
pub(crate) mod connect;
mod delivery;
pub(crate) mod exactly_once;
pub(crate) mod hang_up;
mod inbound;
mod latest_readers;
mod latest_values;
mod observe;
pub(crate) mod persist;
#[cfg(test)]
mod persist_tests;
mod point_read;
#[cfg(test)]
mod powercut_tests;
mod queue_work;
mod replies;
pub(crate) mod retained_writes;
mod seek;
mod session_room;
mod shared;
pub(crate) mod subscribe;

/// The lines a client can make the handlers repeat, each bounded by a
/// limit of its own; the tick reports what each left out.
pub(crate) static LIMITED_LINES: [&crate::log_limit::LogLimit; 8] = [
    &subscribe::SUBSCRIPTION_REFUSED,
    &inbound::PUBLISH_REFUSED,
    &authenticate::NAME_NOT_IDENTITY,
    &connect::CONNECT_REFUSED,
    &authorize::GRANT_WITHHELD,
    &queue_work::RESPONSE_IGNORED,
    &queue_work::DEAD_LETTERED,
    &channels::POSITIONS_NOT_STORED,
];
