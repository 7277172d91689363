//! Broadcast topics: which sessions a topic's messages go to, the retained
//! values, shared groups, the log that keeps messages for sessions away,
//! and exactly-once publishes held until their release.

pub(crate) mod log;
pub(crate) mod qos2_holds;
pub mod retained;
pub mod shared;
pub mod topic_index;
