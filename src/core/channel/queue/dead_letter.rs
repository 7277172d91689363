//! Where a queue's failed work goes: `<name>__dlq`, an append channel on
//! the queue's provider, under topics derived from the queue's own. The
//! configuration reader derives the channel from these rules and the core
//! files each dead letter by them, so both agree by construction.

/// The level a dead-lettered record's topic gains.
pub const DLQ_LEVEL: &str = "__dlq";

/// What a dead-letter channel's name ends with.
pub const DLQ_SUFFIX: &str = "__dlq";

/// The name of `queue`'s dead-letter channel.
pub fn dead_letter_channel_name(queue: &str) -> String {
    format!("{queue}{DLQ_SUFFIX}")
}

/// The filter a queue's dead letters are filed under: `__dlq` takes the
/// place of a final `#` (which follows it), or is appended.
pub fn dead_letter_filter(queue_filter: &str) -> String {
    match queue_filter.strip_suffix('#') {
        Some(head) => format!("{head}{DLQ_LEVEL}/#"),
        None => format!("{queue_filter}/{DLQ_LEVEL}"),
    }
}

/// A queue's job topic as its dead letter carries it. `queue_filter` is the
/// filter that claimed it: a `#` there puts `__dlq` at the `#`'s level.
pub fn dead_letter_topic(queue_filter: &str, topic: &str) -> String {
    if queue_filter.ends_with('#') {
        let fixed = queue_filter.split('/').count() - 1;
        let mut levels: Vec<&str> = topic.split('/').collect();
        let at = fixed.min(levels.len());
        levels.insert(at, DLQ_LEVEL);
        levels.join("/")
    } else {
        format!("{topic}/{DLQ_LEVEL}")
    }
}
