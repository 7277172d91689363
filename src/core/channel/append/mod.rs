//! What only `append` channels have: a consumer may move its position,
//! by offset or by time, through a seek topic. The records themselves and
//! their readers are every channel's, in the parent module.

pub mod seek;
