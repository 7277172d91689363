//! What only `append` channels have: a consumer may move its position,
//! by offset or by time, through a seek topic; this is what a seek means.
//! The records themselves and their readers are every channel's, in the
//! parent module, and handling a seek is the broker's (`broker/seek.rs`).

pub mod seek;
