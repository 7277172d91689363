//! Where a key of a YAML file is written, for findings that name a line.
//!
//! The YAML reader keeps no positions, so a finding about the acl_file
//! finds its line again in the text: a walk down block-style keys and list
//! items by indentation. A path it cannot follow (flow style, anchors)
//! gives no line, and the finding names the key path alone.

/// One step down a path: a mapping key, or the n-th item of a list.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step<'a> {
    Key(&'a str),
    Item(usize),
}

/// Indentation and content of each line that holds something.
pub(super) struct Lines<'a> {
    lines: Vec<(usize, usize, &'a str)>,
}

impl<'a> Lines<'a> {
    pub(super) fn new(text: &'a str) -> Lines<'a> {
        let lines = text
            .lines()
            .enumerate()
            .filter_map(|(index, line)| {
                let content = line.trim_start();
                let keep = !content.is_empty() && !content.starts_with('#');
                keep.then(|| (index + 1, line.len() - content.len(), content))
            })
            .collect();
        Lines { lines }
    }

    /// The 1-based line `path` leads to, if the walk can follow it.
    pub(super) fn of(&self, path: &[Step<'_>]) -> Option<usize> {
        // Where the search starts, and the indentation a line must pass to
        // lie inside what was found last (`None` at the top).
        let mut from = 0;
        let mut parent_indent: Option<usize> = None;
        let mut found = None;
        for step in path {
            let inside = |indent: usize| parent_indent.is_none_or(|p| indent > p);
            let mut hit = None;
            let mut items = 0;
            let mut item_indent = None;
            for (i, &(_, indent, content)) in self.lines.iter().enumerate().skip(from) {
                // The line the last step found may hold this step's key,
                // past its dash; every later line must lie inside it.
                if i > from && !inside(indent) {
                    break;
                }
                let (key_indent, key_content) = match content.strip_prefix("- ") {
                    Some(rest) => (indent + 2, rest),
                    None => (indent, content),
                };
                match *step {
                    Step::Key(key) => {
                        if inside(key_indent) && is_key(key_content, key) {
                            hit = Some((i, key_indent));
                            break;
                        }
                    }
                    Step::Item(n) => {
                        let is_item = content.starts_with('-') && inside(indent);
                        if !is_item || item_indent.is_some_and(|d| d != indent) {
                            continue;
                        }
                        item_indent = Some(indent);
                        if items == n {
                            hit = Some((i, indent));
                            break;
                        }
                        items += 1;
                    }
                }
            }
            let (i, indent) = hit?;
            found = Some(self.lines[i].0);
            from = match step {
                // An item's first key sits on its dash's line.
                Step::Item(_) => i,
                Step::Key(_) => i + 1,
            };
            parent_indent = Some(indent);
        }
        found
    }
}

fn is_key(content: &str, key: &str) -> bool {
    [
        format!("{key}:"),
        format!("\"{key}\":"),
        format!("'{key}':"),
    ]
    .iter()
    .any(|form| content.starts_with(form.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_items_are_found_by_indentation() {
        let text = "\
roles:
  # a comment
  tour:
    - channel: events
      allow: [write]
    - topic: \"#\"
      allow: [read]
  device:
    - topic: iot/%u
users:
  \"device-*\":
    roles: [device]
";
        let lines = Lines::new(text);
        assert_eq!(lines.of(&[Step::Key("roles")]), Some(1));
        assert_eq!(lines.of(&[Step::Key("roles"), Step::Key("tour")]), Some(3));
        let tour = [Step::Key("roles"), Step::Key("tour")];
        assert_eq!(lines.of(&[tour[0], tour[1], Step::Item(1)]), Some(6));
        assert_eq!(
            lines.of(&[tour[0], tour[1], Step::Item(0), Step::Key("allow")]),
            Some(5)
        );
        assert_eq!(
            lines.of(&[Step::Key("roles"), Step::Key("device"), Step::Item(0)]),
            Some(9)
        );
        assert_eq!(
            lines.of(&[
                Step::Key("users"),
                Step::Key("device-*"),
                Step::Key("roles")
            ]),
            Some(12)
        );
        assert_eq!(lines.of(&[Step::Key("users"), Step::Key("nobody")]), None);
    }
}
