//! Topic-filter and name-pattern arithmetic the decisions rest on.
//!
//! Pure functions over strings: which topics a filter admits compared with
//! another's, and the `*` patterns that name users and client ids.

/// Whether every topic `inner` matches is also matched by `outer`. Both are
/// valid plain MQTT filters; a topic name is a filter without wildcards.
pub fn covers(outer: &str, inner: &str) -> bool {
    if reaches_dollar_topics(inner) && starts_with_wildcard(outer) {
        return false;
    }
    let mut outer_levels = outer.split('/');
    let mut inner_levels = inner.split('/');
    loop {
        match (outer_levels.next(), inner_levels.next()) {
            (Some("#"), _) => return true,
            (None, None) => return true,
            // `a/#` matches `a` too, so `inner` may stop where `outer`
            // continues with `#` alone.
            (Some(next), None) => return next == "#" && outer_levels.next().is_none(),
            (None, Some(_)) => return false,
            (Some(_), Some("#")) => return false,
            (Some("+"), Some(_)) => {}
            (Some(_), Some("+")) => return false,
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// The filter matching exactly the topics both `a` and `b` match, or `None`
/// where no topic matches both.
pub fn intersect(a: &str, b: &str) -> Option<String> {
    if (starts_with_wildcard(a) && reaches_dollar_topics(b))
        || (starts_with_wildcard(b) && reaches_dollar_topics(a))
    {
        return None;
    }
    let a_levels: Vec<&str> = a.split('/').collect();
    let b_levels: Vec<&str> = b.split('/').collect();
    let mut levels: Vec<&str> = Vec::with_capacity(a_levels.len().max(b_levels.len()));
    let mut index = 0;
    loop {
        match (a_levels.get(index), b_levels.get(index)) {
            (Some(&"#"), _) => {
                levels.extend(&b_levels[index..]);
                break;
            }
            (_, Some(&"#")) => {
                levels.extend(&a_levels[index..]);
                break;
            }
            (None, None) => break,
            (None, Some(_)) | (Some(_), None) => return None,
            (Some(&"+"), Some(&level)) | (Some(&level), Some(&"+")) => levels.push(level),
            (Some(&x), Some(&y)) if x == y => levels.push(x),
            _ => return None,
        }
        index += 1;
    }
    if levels.is_empty() {
        // `#` against `#`'s parent level: the empty remainder of `a/#`.
        return None;
    }
    Some(levels.join("/"))
}

/// A filter whose first level is a wildcard matches no topic whose first
/// level starts with `$` (MQTT-4.7.2-1): `#` does not reach `$SYS/x`.
fn starts_with_wildcard(filter: &str) -> bool {
    filter.starts_with(['+', '#'])
}

/// Whether a filter's topics are `$` topics: its first level is spelled
/// out and starts with `$`.
fn reaches_dollar_topics(filter: &str) -> bool {
    filter.starts_with('$')
}

/// Whether `pattern`, where `*` stands for any run of characters, matches
/// `text` whole.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let p = pattern.as_bytes();
    let t = text.as_bytes();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and how much of `text` it has taken.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((star_pi, star_ti)) = star {
            pi = star_pi + 1;
            ti = star_ti + 1;
            star = Some((star_pi, star_ti + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Characters a pattern spells out: how exactly it names what it matches.
pub fn literal_count(pattern: &str) -> usize {
    pattern.chars().filter(|&c| c != '*').count()
}

/// Whether some text matches both `a` and `b`.
pub fn globs_overlap(a: &str, b: &str) -> bool {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // reachable[i][j]: some text aligns the first i of `a` with the first j
    // of `b`. A `*` may be skipped, or absorb one character the other side
    // spells out.
    let mut reachable = vec![vec![false; b.len() + 1]; a.len() + 1];
    reachable[0][0] = true;
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            if !reachable[i][j] {
                continue;
            }
            let (x, y) = (a.get(i), b.get(j));
            if x == Some(&'*') {
                reachable[i + 1][j] = true;
                if y.is_some() {
                    reachable[i][j + 1] = true;
                }
            }
            if y == Some(&'*') {
                reachable[i][j + 1] = true;
                if x.is_some() {
                    reachable[i + 1][j] = true;
                }
            }
            if let (Some(x), Some(y)) = (x, y) {
                if x == y && *x != '*' {
                    reachable[i + 1][j + 1] = true;
                }
            }
        }
    }
    reachable[a.len()][b.len()]
}

/// Puts `user` for `%u` and `client_id` for `%c` into `template`, in one
/// pass. `Err` names the substitution that would have changed the
/// template's structure: a value holding `+`, `#` or `/`. A `%c` with no
/// client id to put in is left as written.
pub fn substitute(template: &str, user: &str, client_id: Option<&str>) -> Result<String, Withheld> {
    let mut out = String::with_capacity(template.len() + user.len());
    let mut rest = template;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let value = match after.chars().next() {
            Some('u') => Some(("%u", user)),
            Some('c') => client_id.map(|c| ("%c", c)),
            _ => None,
        };
        match value {
            Some((marker, value)) => {
                if value.contains(['+', '#', '/']) {
                    return Err(Withheld { marker });
                }
                out.push_str(value);
                rest = &after[1..];
            }
            None => {
                out.push('%');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A rule that grants nothing for one client because its name would have
/// put topic syntax into the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Withheld {
    /// `%u` or `%c`.
    pub marker: &'static str,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn covers_compares_whole_filters() {
        let cases = [
            ("#", "a/b", true),
            ("a/#", "a", true),
            ("a/#", "a/+/c", true),
            ("a/+", "a/b", true),
            ("a/+", "a/#", false),
            ("a/b", "a/+", false),
            ("a/+/c", "a/b/c/d", false),
            ("a/b/#", "a/#", false),
            ("a", "a/b", false),
            ("a/+/#", "a/b", true),
            ("a/+/#", "a", false),
            ("#", "$private/secret", false),
            ("#", "$private/#", false),
            ("+/#", "$SYS/x", false),
            ("$private/#", "$private/secret", true),
            ("$private/+", "$private/secret", true),
            ("#", "a/$x", true),
        ];
        for (outer, inner, want) in cases {
            assert_eq!(covers(outer, inner), want, "{outer} covers {inner}");
        }
    }

    /// Every filter of up to three levels over a small alphabet that
    /// holds an empty level, a plain one, a `$` one and both wildcards.
    pub(crate) fn all_filters() -> Vec<String> {
        const LEVELS: [&str; 5] = ["", "a", "$s", "+", "#"];
        let mut filters: Vec<String> = Vec::new();
        let mut shorter: Vec<String> = vec![String::new()];
        for depth in 1..=3 {
            let mut next = Vec::new();
            for prefix in &shorter {
                if prefix.ends_with('#') {
                    continue;
                }
                for level in LEVELS {
                    let filter = match depth {
                        1 => level.to_string(),
                        _ => format!("{prefix}/{level}"),
                    };
                    next.push(filter);
                }
            }
            filters.extend(next.iter().cloned());
            shorter = next;
        }
        filters.retain(|f| crate::codec::topic::is_valid_topic_filter(f));
        filters
    }

    /// Every topic of up to four levels over the same plain letters.
    pub(crate) fn all_topics() -> Vec<String> {
        let mut topics = Vec::new();
        let mut shorter = vec![String::new()];
        for depth in 1..=4 {
            let mut next = Vec::new();
            for prefix in &shorter {
                for level in ["", "a", "$s"] {
                    next.push(match depth {
                        1 => level.to_string(),
                        _ => format!("{prefix}/{level}"),
                    });
                }
            }
            topics.extend(next.iter().cloned());
            shorter = next;
        }
        topics.retain(|t| crate::codec::topic::is_valid_topic_name(t));
        topics
    }

    /// `covers` and `intersect` agree with MQTT's own matching on every
    /// pair of filters and every topic of the alphabet, `$` topics
    /// included: a grant the engine works out from them never reaches a
    /// topic the grant's filter does not match.
    #[test]
    fn covers_and_intersect_agree_with_matching_on_every_small_filter() {
        use crate::codec::topic::matches;
        let filters = all_filters();
        let topics = all_topics();
        let matched: Vec<Vec<bool>> = filters
            .iter()
            .map(|f| topics.iter().map(|t| matches(f, t)).collect())
            .collect();
        for (o, outer) in filters.iter().enumerate() {
            for (i, inner) in filters.iter().enumerate() {
                let sound = (0..topics.len()).all(|t| !matched[i][t] || matched[o][t]);
                if covers(outer, inner) {
                    assert!(sound, "{outer} is said to cover {inner}");
                }
                if !inner.contains(['+', '#']) {
                    assert_eq!(
                        covers(outer, inner),
                        matches(outer, inner),
                        "{outer} / {inner}"
                    );
                }
                let both = (0..topics.len()).filter(|&t| matched[o][t] && matched[i][t]);
                match intersect(outer, inner) {
                    Some(common) => {
                        for (t, topic) in topics.iter().enumerate() {
                            assert_eq!(
                                matches(&common, topic),
                                matched[o][t] && matched[i][t],
                                "{outer} and {inner} meet in {common}, and {topic} says otherwise"
                            );
                        }
                    }
                    None => assert_eq!(both.count(), 0, "{outer} and {inner} do meet"),
                }
            }
        }
    }

    #[test]
    fn intersect_finds_the_common_topics() {
        let cases = [
            ("#", "a/b", Some("a/b")),
            ("a/+", "+/b", Some("a/b")),
            ("a/#", "a", Some("a")),
            ("a/b", "a/c", None),
            ("a/+/c", "a/b", None),
            ("iot/+/events/#", "iot/hq/+/x", Some("iot/hq/events/x")),
        ];
        for (a, b, want) in cases {
            assert_eq!(intersect(a, b).as_deref(), want, "{a} and {b}");
            assert_eq!(intersect(b, a).as_deref(), want, "{b} and {a}");
        }
    }

    #[test]
    fn globs_match_and_overlap() {
        assert!(glob_matches("device-*", "device-7"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("*-7", "device-7"));
        assert!(!glob_matches("device-*", "sensor-7"));
        assert!(glob_matches("a*b*c", "aXXbYYc"));
        assert!(!glob_matches("a*b*c", "aXXbYY"));
        assert!(globs_overlap("device-*", "*-7"));
        assert!(globs_overlap("a*", "*b"));
        assert!(!globs_overlap("a*", "b*"));
        assert!(!globs_overlap("north-*", "south-*"));
        assert!(globs_overlap("x", "x"));
        assert_eq!(literal_count("device-*"), 7);
    }

    #[test]
    fn substitution_is_one_pass_and_refuses_topic_syntax() {
        assert_eq!(
            substitute("iot/%u/%c", "u1", Some("c1")).unwrap(),
            "iot/u1/c1"
        );
        assert_eq!(substitute("iot/%c", "u", Some("%u")).unwrap(), "iot/%u");
        assert_eq!(substitute("iot/%c", "u", None).unwrap(), "iot/%c");
        assert_eq!(substitute("50%", "u", None).unwrap(), "50%");
        assert_eq!(
            substitute("iot/%c", "u", Some("#")),
            Err(Withheld { marker: "%c" })
        );
        assert_eq!(
            substitute("iot/%u", "a/b", None),
            Err(Withheld { marker: "%u" })
        );
    }
}
