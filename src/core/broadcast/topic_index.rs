//! Which sessions' filters match a topic: a trie over topic levels.
//!
//! Matching walks one path per literal level plus the `+` and `#` branches,
//! so its cost follows the topic's depth and the filters that really match,
//! not the number of subscriptions.

use std::collections::HashMap;
use std::rc::Rc;

use crate::codec::SubscriptionOptions;
use crate::core::partition::Slice;
use crate::core::slab::Key;

/// Who a subscription delivers to: one session, or a shared group that
/// hands each message to one of its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Session(Key),
    Group(Key),
}

/// One subscription as the index keeps it. A group's entry carries no
/// options: each member's own are kept with the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    pub target: Target,
    pub options: SubscriptionOptions,
    pub subscription_id: Option<u32>,
    /// The slice its SUBSCRIBE declared; `None` takes every topic.
    pub slice: Option<Rc<Slice>>,
}

impl Subscriber {
    /// What routing keeps of a match once its slice has admitted the topic.
    pub fn matched(&self) -> Matched {
        Matched {
            target: self.target,
            options: self.options,
            subscription_id: self.subscription_id,
        }
    }
}

/// A subscription that matched a message: plain data, so a fan-out's list
/// of matches is copied, sorted and cleared without touching reference
/// counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matched {
    pub target: Target,
    pub options: SubscriptionOptions,
    pub subscription_id: Option<u32>,
}

#[derive(Default)]
struct Node {
    children: HashMap<Box<str>, usize>,
    subscribers: Vec<Subscriber>,
}

impl Node {
    fn is_unused(&self) -> bool {
        self.children.is_empty() && self.subscribers.is_empty()
    }
}

pub struct TopicIndex {
    nodes: Vec<Node>,
    free: Vec<usize>,
}

const ROOT: usize = 0;

impl Default for TopicIndex {
    fn default() -> Self {
        TopicIndex::new()
    }
}

impl TopicIndex {
    pub fn new() -> TopicIndex {
        TopicIndex {
            nodes: vec![Node::default()],
            free: Vec::new(),
        }
    }

    /// Adds or replaces the target's subscription to `filter`. Returns true
    /// when the target already held this filter.
    pub fn insert(&mut self, filter: &str, subscriber: Subscriber) -> bool {
        let mut node = ROOT;
        for level in filter.split('/') {
            node = match self.nodes[node].children.get(level) {
                Some(&child) => child,
                None => {
                    let child = self.allocate();
                    self.nodes[node].children.insert(level.into(), child);
                    child
                }
            };
        }
        let subscribers = &mut self.nodes[node].subscribers;
        match subscribers
            .iter_mut()
            .find(|s| s.target == subscriber.target)
        {
            Some(existing) => {
                *existing = subscriber;
                true
            }
            None => {
                subscribers.push(subscriber);
                false
            }
        }
    }

    /// The subscriptions to exactly `filter`, as written.
    pub fn subscribers_of(&self, filter: &str) -> &[Subscriber] {
        let mut node = ROOT;
        for level in filter.split('/') {
            match self.nodes[node].children.get(level) {
                Some(&child) => node = child,
                None => return &[],
            }
        }
        &self.nodes[node].subscribers
    }

    /// Removes the target's subscription to `filter`; true if it existed.
    pub fn remove(&mut self, filter: &str, target: Target) -> bool {
        let mut path = Vec::with_capacity(8);
        let mut node = ROOT;
        for level in filter.split('/') {
            match self.nodes[node].children.get(level) {
                Some(&child) => {
                    path.push((node, level));
                    node = child;
                }
                None => return false,
            }
        }
        let subscribers = &mut self.nodes[node].subscribers;
        let Some(position) = subscribers.iter().position(|s| s.target == target) else {
            return false;
        };
        subscribers.swap_remove(position);
        // Prune the branch bottom-up so that unsubscribed filters cost nothing.
        while let Some((parent, level)) = path.pop() {
            if !self.nodes[node].is_unused() {
                break;
            }
            self.nodes[parent].children.remove(level);
            self.release(node);
            node = parent;
        }
        true
    }

    /// Calls `visit` for every subscription whose filter matches `topic`.
    pub fn for_each_match(&self, topic: &str, mut visit: impl FnMut(&Subscriber)) {
        // A filter starting with a wildcard does not match a `$` topic.
        let dollar = topic.starts_with('$');
        self.walk(ROOT, topic, true, dollar, &mut visit);
    }

    fn walk(
        &self,
        node: usize,
        rest: &str,
        first_level: bool,
        dollar: bool,
        visit: &mut impl FnMut(&Subscriber),
    ) {
        let (level, tail) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let children = &self.nodes[node].children;
        let wildcards_allowed = !(first_level && dollar);
        if wildcards_allowed {
            if let Some(&hash) = children.get("#") {
                self.nodes[hash].subscribers.iter().for_each(&mut *visit);
            }
        }
        let mut step = |child: usize| match tail {
            Some(tail) => self.walk(child, tail, false, dollar, visit),
            None => {
                self.nodes[child].subscribers.iter().for_each(&mut *visit);
                // "a/#" also matches "a" itself.
                if let Some(&hash) = self.nodes[child].children.get("#") {
                    self.nodes[hash].subscribers.iter().for_each(&mut *visit);
                }
            }
        };
        if let Some(&child) = children.get(level) {
            step(child);
        }
        if wildcards_allowed && level != "+" {
            if let Some(&plus) = children.get("+") {
                step(plus);
            }
        }
    }

    fn allocate(&mut self) -> usize {
        match self.free.pop() {
            Some(index) => index,
            None => {
                self.nodes.push(Node::default());
                self.nodes.len() - 1
            }
        }
    }

    fn release(&mut self, index: usize) {
        self.nodes[index] = Node::default();
        self.free.push(index);
    }

    /// Nodes in use, the root included: what the index costs.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(index: u32) -> Target {
        Target::Session(Key::first(index))
    }

    fn sub(index: u32) -> Subscriber {
        Subscriber {
            target: key(index),
            options: SubscriptionOptions::default(),
            subscription_id: None,
            slice: None,
        }
    }

    fn matches(index: &TopicIndex, topic: &str) -> Vec<u32> {
        let mut found = Vec::new();
        index.for_each_match(topic, |s| match s.target {
            Target::Session(key) | Target::Group(key) => found.push(key.index),
        });
        found.sort();
        found
    }

    #[test]
    fn literal_plus_and_hash() {
        let mut index = TopicIndex::new();
        index.insert("a/b/c", sub(1));
        index.insert("a/+/c", sub(2));
        index.insert("a/#", sub(3));
        index.insert("#", sub(4));
        index.insert("+/+", sub(5));
        index.insert("a/b", sub(6));
        assert_eq!(matches(&index, "a/b/c"), vec![1, 2, 3, 4]);
        assert_eq!(matches(&index, "a"), vec![3, 4]);
        assert_eq!(matches(&index, "a/b"), vec![3, 4, 5, 6]);
        assert_eq!(matches(&index, "x/y/z"), vec![4]);
    }

    #[test]
    fn wildcards_at_the_first_level_skip_dollar_topics() {
        let mut index = TopicIndex::new();
        index.insert("#", sub(1));
        index.insert("+/info", sub(2));
        index.insert("$SYS/#", sub(3));
        index.insert("$SYS/+", sub(4));
        assert_eq!(matches(&index, "$SYS/info"), vec![3, 4]);
        assert_eq!(matches(&index, "SYS/info"), vec![1, 2]);
    }

    #[test]
    fn plus_matches_an_empty_level() {
        let mut index = TopicIndex::new();
        index.insert("a/+/c", sub(1));
        index.insert("+", sub(2));
        assert_eq!(matches(&index, "a//c"), vec![1]);
        assert_eq!(matches(&index, ""), vec![2]);
        assert_eq!(matches(&index, "/"), Vec::<u32>::new());
    }

    #[test]
    fn replace_and_remove_prune_the_trie() {
        let mut index = TopicIndex::new();
        assert!(!index.insert("a/b/c", sub(1)));
        assert!(index.insert("a/b/c", sub(1)));
        index.insert("a/b", sub(2));
        assert_eq!(matches(&index, "a/b/c"), vec![1]);
        assert!(index.remove("a/b/c", key(1)));
        assert!(!index.remove("a/b/c", key(1)));
        assert_eq!(index.node_count(), 3);
        assert!(index.remove("a/b", key(2)));
        assert_eq!(index.node_count(), 1);
        assert!(matches(&index, "a/b/c").is_empty());
    }

    #[test]
    fn a_literal_plus_level_in_a_topic_is_not_walked_twice() {
        // Topics never hold '+', but the walk must not double-count if one did.
        let mut index = TopicIndex::new();
        index.insert("+", sub(1));
        assert_eq!(matches(&index, "+"), vec![1]);
    }
}
