//! Topic names, topic filters and how they match (MQTT 5 section 4.7).
//!
//! The codec has already excluded U+0000 and ill-formed UTF-8, so these
//! functions only look at the structure of levels.

/// A topic name a PUBLISH may carry: non-empty and without wildcards.
pub fn is_valid_topic_name(topic: &str) -> bool {
    !topic.is_empty() && !topic.contains(['+', '#'])
}

/// A topic filter: non-empty, '+' only as a whole level, '#' only as the
/// whole last level.
pub fn is_valid_topic_filter(filter: &str) -> bool {
    if filter.is_empty() {
        return false;
    }
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let is_last = levels.peek().is_none();
        let valid = match level {
            "#" => is_last,
            "+" => true,
            _ => !level.contains(['+', '#']),
        };
        if !valid {
            return false;
        }
    }
    true
}

/// Why a SUBSCRIBE or UNSUBSCRIBE filter is not a topic filter at all, or
/// `None` when it is one: non-empty (MQTT-4.7.3-1), its wildcards whole
/// levels (MQTT-4.7.1-1, -2), and, where `share_form` (MQTT 5 defines the
/// form; 3.1.1 does not), a shared one `$share/{name}/{filter}` with a name
/// and a filter (MQTT-4.8.2-1, -2). Such a filter is a protocol error, not
/// a refusal of one filter: the connection is closed for it.
pub fn filter_form_error(filter: &str, share_form: bool) -> Option<&'static str> {
    let inner = match parse_shared(filter).filter(|_| share_form) {
        None => filter,
        Some(Ok(shared)) => shared.filter,
        Some(Err(())) => return Some("a shared subscription is $share/<name>/<filter>"),
    };
    if inner.is_empty() {
        Some("an empty topic filter")
    } else if !is_valid_topic_filter(inner) {
        Some("a wildcard takes less than a whole level")
    } else {
        None
    }
}

/// Topic levels in a name or filter: one more than its '/' count.
pub fn level_count(s: &str) -> usize {
    s.bytes().filter(|&b| b == b'/').count() + 1
}

/// Whether a (valid, non-shared) filter matches a (valid) topic name.
///
/// A filter starting with a wildcard does not match topics starting with
/// '$' (MQTT-4.7.2-1); "a/#" also matches "a" (the parent level); '+'
/// matches one level, even an empty one.
pub fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && filter.starts_with(['+', '#']) {
        return false;
    }
    let mut filter_levels = filter.split('/');
    let mut topic_levels = topic.split('/');
    loop {
        match (filter_levels.next(), topic_levels.next()) {
            (Some("#"), _) => return true,
            (None, None) => return true,
            (Some("+"), Some(_)) => {}
            (Some(wanted), Some(level)) if wanted == level => {}
            _ => return false,
        }
    }
}

/// The parts of a shared subscription filter `$share/{name}/{filter}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedFilter<'a> {
    pub share_name: &'a str,
    pub filter: &'a str,
}

/// `None` if `filter` is not a shared subscription; `Err` if it starts
/// with "$share/" but the share name is empty or holds a wildcard, or no
/// filter follows it (MQTT-4.8.2-1, -2). The filter part is returned as is:
/// the caller checks it with [`is_valid_topic_filter`].
#[allow(clippy::result_unit_err)]
pub fn parse_shared(filter: &str) -> Option<Result<SharedFilter<'_>, ()>> {
    let rest = filter.strip_prefix("$share/")?;
    let Some((share_name, filter)) = rest.split_once('/') else {
        return Some(Err(()));
    };
    if share_name.is_empty() || share_name.contains(['+', '#']) || filter.is_empty() {
        return Some(Err(()));
    }
    Some(Ok(SharedFilter { share_name, filter }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_have_no_wildcards() {
        for name in ["a", "a/b", "/", "a//b", "$SYS/uptime", " ", "ü/é"] {
            assert!(is_valid_topic_name(name), "{name}");
        }
        for name in ["", "+", "#", "a/+", "a/#", "a+b", "sport#"] {
            assert!(!is_valid_topic_name(name), "{name}");
        }
    }

    #[test]
    fn wildcards_must_fill_whole_levels() {
        let valid = [
            "#",
            "+",
            "a/#",
            "+/+",
            "/+",
            "+/",
            "a/+/b",
            "sport/tennis/#",
            "//",
            "$SYS/#",
        ];
        for filter in valid {
            assert!(is_valid_topic_filter(filter), "{filter}");
        }
        let invalid = [
            "", "a#", "a/#/b", "#/a", "a+", "a/b+/c", "+a", "##", "a/++", "#/",
        ];
        for filter in invalid {
            assert!(!is_valid_topic_filter(filter), "{filter}");
        }
    }

    #[test]
    fn levels_are_counted_by_separators() {
        assert_eq!(level_count("a"), 1);
        assert_eq!(level_count("/"), 2);
        assert_eq!(level_count("a/b/c"), 3);
        assert_eq!(level_count(""), 1);
    }

    #[test]
    fn plain_filters_match_exactly() {
        assert!(matches("a/b", "a/b"));
        assert!(!matches("a/b", "a/b/c"));
        assert!(!matches("a/b/c", "a/b"));
        assert!(!matches("a/b", "a/B"));
        assert!(!matches("a", "/a"));
        assert!(matches("/a", "/a"));
    }

    #[test]
    fn multi_level_wildcard_matches_parent_and_children() {
        assert!(matches("sport/#", "sport"));
        assert!(matches("sport/#", "sport/"));
        assert!(matches("sport/#", "sport/tennis/player1"));
        assert!(matches("#", "sport"));
        assert!(matches("#", "/"));
        assert!(!matches("sport/#", "sports"));
        assert!(!matches("sport/tennis/#", "sport"));
    }

    #[test]
    fn single_level_wildcard_matches_one_level_even_empty() {
        assert!(matches("sport/+", "sport/tennis"));
        assert!(matches("sport/+", "sport/"));
        assert!(!matches("sport/+", "sport"));
        assert!(!matches("sport/+", "sport/tennis/player1"));
        assert!(matches("+/+", "/finance"));
        assert!(matches("/+", "/finance"));
        assert!(!matches("+", "/finance"));
        assert!(matches("+", ""));
        assert!(matches("a/+/c", "a//c"));
        assert!(matches("+/tennis/#", "sport/tennis"));
    }

    #[test]
    fn wildcards_at_the_start_skip_dollar_topics() {
        assert!(!matches("#", "$SYS/uptime"));
        assert!(!matches("+/monitor/Clients", "$SYS/monitor/Clients"));
        assert!(!matches("+", "$SYS"));
        assert!(matches("$SYS/#", "$SYS/monitor/Clients"));
        assert!(matches("$SYS/monitor/+", "$SYS/monitor/Clients"));
        // Only the first level is special.
        assert!(matches("a/#", "a/$b"));
        assert!(matches("a/+", "a/$b"));
    }

    #[test]
    fn shared_filters_are_split() {
        assert_eq!(parse_shared("a/b"), None);
        assert_eq!(parse_shared("$share"), None);
        assert_eq!(parse_shared("$SYS/x"), None);
        assert_eq!(
            parse_shared("$share/group/sport/#"),
            Some(Ok(SharedFilter {
                share_name: "group",
                filter: "sport/#"
            }))
        );
        assert_eq!(
            parse_shared("$share/g//"),
            Some(Ok(SharedFilter {
                share_name: "g",
                filter: "/"
            }))
        );
    }

    #[test]
    fn filters_that_are_no_filter_say_why() {
        for filter in [
            "a",
            "#",
            "+/+",
            "$share/g/#",
            "$share/g//",
            "$SHARE/g/t",
            "$share",
        ] {
            assert_eq!(filter_form_error(filter, true), None, "{filter}");
        }
        let bad = [
            ("", "an empty topic filter"),
            ("#/test/topic", "a wildcard takes less than a whole level"),
            ("a/b#", "a wildcard takes less than a whole level"),
            ("$share/g/a/#/b", "a wildcard takes less than a whole level"),
            (
                "$share/name",
                "a shared subscription is $share/<name>/<filter>",
            ),
            (
                "$share/name/",
                "a shared subscription is $share/<name>/<filter>",
            ),
            (
                "$share//t",
                "a shared subscription is $share/<name>/<filter>",
            ),
            (
                "$share/g+/t",
                "a shared subscription is $share/<name>/<filter>",
            ),
        ];
        for (filter, why) in bad {
            assert_eq!(filter_form_error(filter, true), Some(why), "{filter}");
        }
        // Without the shared form `$share/name` is a filter like another;
        // the empty filter and a wildcard inside a level are still none.
        assert_eq!(filter_form_error("$share/name", false), None);
        assert_eq!(filter_form_error("$share//t", false), None);
        assert!(filter_form_error("", false).is_some());
        assert!(filter_form_error("$share/g/a#", false).is_some());
    }

    #[test]
    fn bad_shared_filters_are_errors() {
        for filter in [
            "$share/",
            "$share/group",
            "$share/group/",
            "$share//a",
            "$share/+/a",
            "$share/g#/a",
        ] {
            assert_eq!(parse_shared(filter), Some(Err(())), "{filter}");
        }
    }
}
