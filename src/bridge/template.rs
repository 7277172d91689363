//! Where a record lands at the other end of a rule: the filter's `+`
//! levels are captured as `$1..$N` and its `#` tail as `$#`, and the
//! rule's topic is rebuilt from them. One piece of code for both
//! directions, so a topic the bridge may not publish is refused the same
//! way whichever way it travels.

use super::settings::Rule;

/// What a filter captured from a topic it matched.
#[derive(Debug, PartialEq, Eq)]
pub struct Captures<'a> {
    /// One per `+` level, in order.
    pub plus: Vec<&'a str>,
    /// The levels `#` matched, possibly none; `None` when the filter has no `#`.
    pub tail: Option<Vec<&'a str>>,
}

/// The captures of `filter` over `topic`, or `None` when it does not match.
/// A `#` matches zero levels too, so `a/#` captures an empty tail from `a`.
pub fn capture<'a>(filter: &str, topic: &'a str) -> Option<Captures<'a>> {
    let mut plus = Vec::new();
    let mut levels = topic.split('/');
    let filter_levels: Vec<&str> = filter.split('/').collect();
    for (at, level) in filter_levels.iter().enumerate() {
        if *level == "#" {
            // A wildcard first level never matches a `$` topic (MQTT-4.7.2-1).
            if at == 0 && topic.starts_with('$') {
                return None;
            }
            return Some(Captures {
                plus,
                tail: Some(levels.collect()),
            });
        }
        let got = levels.next()?;
        match *level {
            "+" if at == 0 && got.starts_with('$') => return None,
            "+" => plus.push(got),
            literal if literal == got => {}
            _ => return None,
        }
    }
    levels
        .next()
        .is_none()
        .then_some(Captures { plus, tail: None })
}

/// Why a record matching a rule has no topic to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmappable {
    /// The result would be empty: a `#` matched nothing and nothing else is left.
    Empty,
    /// The result is in the reserved `$` space, which a bridge never publishes into.
    Reserved,
}

/// The topic `topic` takes under `rule`: `None` when the rule does not
/// match it, `Some(Err)` when it matches and cannot be carried.
pub fn map(rule: &Rule, topic: &str) -> Option<Result<String, Unmappable>> {
    let captures = capture(&rule.filter, topic)?;
    let mapped = match &rule.topic {
        None => topic.to_string(),
        Some(template) => render(template, &captures),
    };
    Some(if mapped.is_empty() {
        Err(Unmappable::Empty)
    } else if mapped.starts_with('$') {
        Err(Unmappable::Reserved)
    } else {
        Ok(mapped)
    })
}

/// The template with its substitutions made. An empty `$#` takes its
/// separator with it.
fn render(template: &str, captures: &Captures<'_>) -> String {
    let mut levels: Vec<&str> = Vec::new();
    for level in template.split('/') {
        if level == "$#" {
            levels.extend(captures.tail.iter().flatten());
        } else if let Some(n) = substitution_number(level) {
            levels.push(captures.plus.get(n - 1).copied().unwrap_or(""));
        } else {
            levels.push(level);
        }
    }
    levels.join("/")
}

fn substitution_number(level: &str) -> Option<usize> {
    let digits = level.strip_prefix('$')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Whether `template` is one `filter` can fill, and what is wrong if not.
/// Also returns the `+` substitutions the template leaves unused, which
/// are legal (a discarded capture collapses finitely many topics).
pub fn check(filter: &str, template: &str) -> Result<Vec<usize>, String> {
    let plus_count = filter.split('/').filter(|l| *l == "+").count();
    let has_tail = filter.ends_with('#');
    if template.is_empty() {
        return Err("a topic cannot be empty".into());
    }
    let levels: Vec<&str> = template.split('/').collect();
    let mut used = vec![false; plus_count];
    let mut uses_tail = false;
    for (at, level) in levels.iter().enumerate() {
        if level.contains('+') || level.contains('#') && *level != "$#" {
            return Err(format!(
                "level {level:?} holds a wildcard; a topic names one topic, so write $1..$N for the filter's + levels and $# for its # tail"
            ));
        }
        if !level.contains('$') {
            continue;
        }
        if *level == "$#" {
            if !has_tail {
                return Err("$# names the filter's # tail, and this filter has no #".into());
            }
            if at + 1 != levels.len() {
                return Err("$# may only be the last level, as # is in a filter".into());
            }
            uses_tail = true;
        } else if let Some(n) = substitution_number(level) {
            if n == 0 || n > plus_count {
                return Err(format!(
                    "${n} names a + level the filter does not have (it has {plus_count})"
                ));
            }
            used[n - 1] = true;
        } else {
            return Err(format!(
                "level {level:?}: a $ always begins a substitution, and only a whole level of $1..$N or $# is one"
            ));
        }
    }
    if has_tail && !uses_tail {
        return Err(
            "the filter ends in # and the topic drops its tail with no $#: every topic under it would land on one topic"
                .into(),
        );
    }
    Ok(used
        .iter()
        .enumerate()
        .filter(|(_, u)| !**u)
        .map(|(i, _)| i + 1)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::settings::Direction;

    fn rule(filter: &str, topic: Option<&str>) -> Rule {
        Rule {
            filter: filter.into(),
            direction: Direction::In,
            topic: topic.map(str::to_string),
        }
    }

    #[test]
    fn substitutions_reorder_and_keep_the_tail() {
        let topic = "fleet/vessel-07/telemetry/hold/psi";
        let cases = [
            (
                "fleet/+/telemetry/#",
                "readings/telemetry/$1/$#",
                "readings/telemetry/vessel-07/hold/psi",
            ),
            (
                "fleet/+/telemetry/#",
                "readings/telemetry/$#",
                "readings/telemetry/hold/psi",
            ),
            (
                "fleet/#",
                "readings/$#",
                "readings/vessel-07/telemetry/hold/psi",
            ),
            ("fleet/+/telemetry/+/+", "t/$3/$1", "t/psi/vessel-07"),
        ];
        for (filter, template, want) in cases {
            assert_eq!(
                map(&rule(filter, Some(template)), topic),
                Some(Ok(want.to_string()))
            );
        }
    }

    #[test]
    fn an_empty_tail_takes_its_separator_and_an_empty_result_is_unmappable() {
        let r = rule("fleet/+/telemetry/#", Some("readings/telemetry/$1/$#"));
        assert_eq!(
            map(&r, "fleet/v7/telemetry"),
            Some(Ok("readings/telemetry/v7".into()))
        );
        assert_eq!(
            map(&rule("fleet/#", Some("$#")), "fleet"),
            Some(Err(Unmappable::Empty))
        );
        assert_eq!(map(&rule("fleet/#", Some("$#")), "other"), None);
    }

    #[test]
    fn a_result_in_the_dollar_space_is_unmappable() {
        assert_eq!(
            map(&rule("a/+", Some("$1/x")), "a/$saguin"),
            Some(Err(Unmappable::Reserved))
        );
        assert_eq!(
            map(&rule("$SYS/#", None), "$SYS/x"),
            Some(Err(Unmappable::Reserved))
        );
    }

    #[test]
    fn wildcards_do_not_match_the_dollar_space_from_the_first_level() {
        assert_eq!(capture("#", "$SYS/x"), None);
        assert_eq!(capture("+/x", "$SYS/x"), None);
        assert!(capture("$SYS/#", "$SYS/x").is_some());
    }

    #[test]
    fn a_template_is_checked_against_its_filter() {
        assert_eq!(check("a/+/b/#", "x/$1/$#"), Ok(vec![]));
        assert_eq!(check("a/+/+", "x/$2"), Ok(vec![1]));
        assert!(check("a/+", "x/$2").unwrap_err().contains("$2"));
        assert!(check("a/+", "x/$#").unwrap_err().contains("no #"));
        assert!(check("a/#", "$#/x").unwrap_err().contains("last level"));
        assert!(check("a/#", "x").unwrap_err().contains("tail"));
        assert!(check("a/#", "$saguin/$#")
            .unwrap_err()
            .contains("substitution"));
        assert!(check("a/+", "x/+").unwrap_err().contains("wildcard"));
    }
}
