//! Which channel holds a topic, and which channels a subscription reaches.
//!
//! Channels claim the topic space with ordinary MQTT filters, and filters
//! may overlap. A topic belongs to the matching filter that spells it out
//! most exactly: comparing two filters level by level from the left, the
//! first level where they differ decides - a spelled-out level beats `+`
//! and `#`, `+` beats `#`, and a filter ending at that level beats one
//! continuing with `#`. Nothing depends on the order channels were given
//! in. A topic no filter matches is broadcast.
//!
//! The filters live in a trie over levels. Visiting children in the order
//! of that preference (spelled out, then `+`, then `#`) makes the first
//! match found the most exact one, so a publish costs one walk whose
//! length follows the topic's depth and the filters that really overlap,
//! not the number of channels.
//!
//! Pure: no I/O, no configuration types. The caller hands in each
//! channel's name and its filters already expanded from `{a,b}` and
//! validated, in any order; a channel's index is its position there.

use crate::fast_hash::FastHashMap;

use crate::codec::topic::is_valid_topic_filter;

/// A topic level no filter spells out. Filters keep `+` and `#` apart
/// from their spelled-out levels, so no spelled-out child is ever `#`, and
/// a walk reading this level takes only the wildcard branches.
const ANY_OTHER_LEVEL: &str = "#";

const ROOT: usize = 0;

/// The filter that holds a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The channel's index, its position in what [`Claims::new`] was given.
    pub channel: usize,
    /// Which of the channel's expanded filters matched.
    pub filter: usize,
}

/// What one subscription filter can be served.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// Every channel holding a topic the filter matches, ascending.
    pub channels: Vec<usize>,
    /// Whether the filter also matches a topic no channel holds.
    pub broadcast: bool,
}

#[derive(Default)]
struct Node {
    /// Spelled-out next levels.
    children: FastHashMap<Box<str>, usize>,
    /// The `+` next level.
    plus: Option<usize>,
    /// A filter ending at this level.
    ends_here: Option<Claim>,
    /// A filter continuing from this level with `#`.
    hash: Option<Claim>,
}

/// The channels' claims on the topic space, built once at startup.
pub struct Claims {
    nodes: Vec<Node>,
    names: Vec<Box<str>>,
    filters: Vec<Vec<Box<str>>>,
}

impl Claims {
    /// Builds the claims of `channels`, each a name and its filters after
    /// `{a,b}` expansion.
    ///
    /// The filters are expected to be valid as the configuration checks
    /// them: MQTT filters whose first level is spelled out. Two channels
    /// carrying the same filter are refused there; here, so that the
    /// answer is still defined, the channel given first keeps it.
    pub fn new<F: AsRef<str>>(channels: &[(&str, &[F])]) -> Claims {
        let mut claims = Claims {
            nodes: vec![Node::default()],
            names: Vec::with_capacity(channels.len()),
            filters: Vec::with_capacity(channels.len()),
        };
        for (channel, (name, filters)) in channels.iter().enumerate() {
            claims.names.push((*name).into());
            claims
                .filters
                .push(filters.iter().map(|f| f.as_ref().into()).collect());
            for (filter, text) in filters.iter().enumerate() {
                claims.insert(text.as_ref(), Claim { channel, filter });
            }
        }
        claims
    }

    fn insert(&mut self, filter: &str, claim: Claim) {
        let mut node = ROOT;
        for level in filter.split('/') {
            if level == "#" {
                // `#` is the last level of a valid filter; whatever a
                // malformed one writes after it is never reached.
                self.nodes[node].hash.get_or_insert(claim);
                return;
            }
            node = self.child_or_new(node, level);
        }
        self.nodes[node].ends_here.get_or_insert(claim);
    }

    fn child_or_new(&mut self, node: usize, level: &str) -> usize {
        let existing = if level == "+" {
            self.nodes[node].plus
        } else {
            self.nodes[node].children.get(level).copied()
        };
        if let Some(child) = existing {
            return child;
        }
        let child = self.nodes.len();
        self.nodes.push(Node::default());
        if level == "+" {
            self.nodes[node].plus = Some(child);
        } else {
            self.nodes[node].children.insert(level.into(), child);
        }
        child
    }

    /// How many channels there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// A channel's name.
    pub fn name(&self, channel: usize) -> &str {
        &self.names[channel]
    }

    /// The expanded filter a claim names, for saying why a topic landed
    /// where it did.
    pub fn filter(&self, claim: Claim) -> &str {
        &self.filters[claim.channel][claim.filter]
    }

    /// The channel holding `topic`, or `None` for a broadcast topic. Runs
    /// on every publish.
    pub fn channel_for_topic(&self, topic: &str) -> Option<usize> {
        self.claim_for_topic(topic).map(|c| c.channel)
    }

    /// The channel holding `topic` and the filter that claimed it.
    pub fn claim_for_topic(&self, topic: &str) -> Option<Claim> {
        // A `$` topic is the broker's own: no channel filter may begin with
        // `$`, and a wildcard never matches one (MQTT-4.7.2-1).
        if topic.is_empty() || topic.starts_with('$') {
            return None;
        }
        self.most_exact(ROOT, topic.split('/'))
    }

    /// The first match in preference order below `node` for the topic
    /// levels still to read.
    fn most_exact<'t>(
        &self,
        node: usize,
        mut levels: impl Iterator<Item = &'t str> + Clone,
    ) -> Option<Claim> {
        let here = &self.nodes[node];
        let Some(level) = levels.next() else {
            return here.ends_here.or(here.hash);
        };
        here.children
            .get(level)
            .and_then(|&child| self.most_exact(child, levels.clone()))
            .or_else(|| {
                here.plus
                    .and_then(|plus| self.most_exact(plus, levels.clone()))
            })
            .or(here.hash)
    }

    /// The channels a subscription to `filter` can be served from: those
    /// holding any topic the filter matches. A filter reaching a channel
    /// only where a more exact channel holds the topic does not reach it.
    /// `filter` is a plain filter (a shared subscription's after
    /// `$share/<name>/`); one that is not a valid filter reaches nothing.
    pub fn channels_reached_by(&self, filter: &str) -> Vec<usize> {
        self.reach(filter).channels
    }

    /// Whether `filter` matches any topic no channel holds.
    pub fn reaches_broadcast(&self, filter: &str) -> bool {
        self.reach(filter).broadcast
    }

    /// [`Claims::channels_reached_by`] and [`Claims::reaches_broadcast`]
    /// in one walk.
    ///
    /// The topic space is infinite, but a level no filter spells out at a
    /// place behaves like any other such level, and below the deepest
    /// filter every longer topic behaves like the shorter one. So the walk
    /// builds one representative topic per distinct case the filter
    /// matches - each spelled-out level the channels' filters offer there,
    /// and one level none of them spells - and asks who holds it. It runs
    /// at SUBSCRIBE, never per publish.
    pub fn reach(&self, filter: &str) -> Reach {
        let mut found = Found {
            channels: vec![false; self.len()],
            unfound: self.len() + 1,
            broadcast: false,
        };
        if is_valid_topic_filter(filter) {
            let wanted: Vec<&str> = filter.split('/').collect();
            self.explore(&wanted, &mut Vec::new(), &[ROOT], &mut found);
        }
        Reach {
            channels: (0..self.len()).filter(|&c| found.channels[c]).collect(),
            broadcast: found.broadcast,
        }
    }

    /// `topic` is the representative built so far, `active` every trie
    /// node whose filter prefix matches it, `wanted` what remains of the
    /// subscription filter.
    fn explore<'a>(
        &'a self,
        wanted: &[&'a str],
        topic: &mut Vec<&'a str>,
        active: &[usize],
        found: &mut Found,
    ) {
        if found.unfound == 0 {
            return;
        }
        match wanted.first() {
            None => self.record(topic, found),
            Some(&"#") => {
                // `#` takes the topic so far as well as every extension.
                if !topic.is_empty() {
                    self.record(topic, found);
                }
                // With no filter prefix left to follow, an extension is
                // matched only by the `#` filters the topic already passed,
                // so it lands where the topic itself did.
                if active.is_empty() {
                    return;
                }
                for level in self.levels_offered(active, topic.is_empty()) {
                    self.step(wanted, level, topic, active, found);
                }
            }
            Some(&"+") => {
                for level in self.levels_offered(active, topic.is_empty()) {
                    self.step(&wanted[1..], level, topic, active, found);
                }
            }
            Some(&level) => self.step(&wanted[1..], level, topic, active, found),
        }
    }

    fn step<'a>(
        &'a self,
        wanted: &[&'a str],
        level: &'a str,
        topic: &mut Vec<&'a str>,
        active: &[usize],
        found: &mut Found,
    ) {
        let next: Vec<usize> = active
            .iter()
            .flat_map(|&n| {
                let node = &self.nodes[n];
                [node.children.get(level).copied(), node.plus]
            })
            .flatten()
            .collect();
        topic.push(level);
        self.explore(wanted, topic, &next, found);
        topic.pop();
    }

    /// The distinct spelled-out levels the active nodes continue with, and
    /// one level none of them spells. A wildcard in the first level does
    /// not match a `$` topic, so such a level is not offered there.
    fn levels_offered(&self, active: &[usize], first_level: bool) -> Vec<&str> {
        let mut levels: Vec<&str> = active
            .iter()
            .flat_map(|&n| self.nodes[n].children.keys().map(|k| &**k))
            .filter(|level| !(first_level && level.starts_with('$')))
            .collect();
        levels.sort_unstable();
        levels.dedup();
        levels.push(ANY_OTHER_LEVEL);
        levels
    }

    fn record(&self, topic: &[&str], found: &mut Found) {
        let holder = match topic.first() {
            Some(first) if !first.starts_with('$') => self.most_exact(ROOT, topic.iter().copied()),
            _ => None,
        };
        let seen = match holder {
            Some(claim) => &mut found.channels[claim.channel],
            None => &mut found.broadcast,
        };
        if !*seen {
            *seen = true;
            found.unfound -= 1;
        }
    }
}

/// What a reach walk has met so far; it stops once it has met everything.
struct Found {
    channels: Vec<bool>,
    /// Channels not yet met, plus one while broadcast is not.
    unfound: usize,
    broadcast: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(channels: &[(&str, &[&str])]) -> Claims {
        Claims::new(channels)
    }

    /// The channel's name holding `topic`, or `-` for broadcast.
    fn holder<'a>(c: &'a Claims, topic: &str) -> &'a str {
        c.channel_for_topic(topic).map_or("-", |i| c.name(i))
    }

    fn reached<'a>(c: &'a Claims, filter: &str) -> (Vec<&'a str>, bool) {
        let reach = c.reach(filter);
        let names = reach.channels.iter().map(|&i| c.name(i)).collect();
        (names, reach.broadcast)
    }

    /// The three channels the topic-space section opens with.
    fn water_and_weather() -> Claims {
        claims(&[
            ("water-location", &["iot/water/+/location/#"]),
            ("water-measurement", &["iot/water/+/+/#"]),
            (
                "weather-measurement",
                &["iot/weather/+/data", "iot/weather/+/events"],
            ),
        ])
    }

    #[test]
    fn topics_land_on_the_most_exact_filter() {
        let c = water_and_weather();
        for (topic, expected) in [
            ("iot/water/w-7/location", "water-location"),
            ("iot/water/w-7/location/gps", "water-location"),
            ("iot/water/w-7/flow", "water-measurement"),
            ("iot/water/w-7/flow/raw", "water-measurement"),
            ("iot/weather/st-3/data", "weather-measurement"),
            ("iot/weather/st-3/events", "weather-measurement"),
            // No `#`, so four levels and no more.
            ("iot/weather/st-3/data/raw", "-"),
            ("iot/weather/st-3/status", "-"),
            // `+/#` needs a level for the `+`.
            ("iot/water/w-7", "-"),
            ("elsewhere", "-"),
        ] {
            assert_eq!(holder(&c, topic), expected, "{topic}");
        }
    }

    #[test]
    fn the_first_differing_level_decides() {
        let c = claims(&[
            ("events", &["iot/+/+/events/#"]),
            ("alarms", &["iot/hq/+/events/alarms"]),
            ("site", &["iot/+/gw/#"]),
            ("exact", &["iot/hq/gw/events"]),
        ]);
        for (topic, expected) in [
            // `hq` beats `+` at level 2.
            ("iot/hq/d1/events/alarms", "alarms"),
            ("iot/hq/d1/events/other", "events"),
            ("iot/north/d1/events/alarms", "events"),
            // At level 2 `+` ties; at level 3 `gw` beats `+`.
            ("iot/north/gw/events/alarms", "site"),
            // `hq` beats `+` at level 2, then `gw` beats `+` at level 3,
            // then a filter ending here beats one going on with `#`.
            ("iot/hq/gw/events", "exact"),
            // At level 5, `alarms` beats `#` of the `events` filter - but
            // `site` lost at level 2 already.
            ("iot/hq/gw/events/alarms", "alarms"),
            ("iot/hq/gw/status", "site"),
            ("iot/north/gw/status", "site"),
        ] {
            assert_eq!(holder(&c, topic), expected, "{topic}");
        }
    }

    #[test]
    fn plus_beats_hash_and_ending_beats_hash() {
        let c = claims(&[("any", &["a/#"]), ("one", &["a/+"]), ("bare", &["a"])]);
        assert_eq!(holder(&c, "a"), "bare");
        assert_eq!(holder(&c, "a/x"), "one");
        assert_eq!(holder(&c, "a/x/y"), "any");
        let c = claims(&[("any", &["a/#"])]);
        assert_eq!(holder(&c, "a"), "any", "# stands for no level too");
    }

    #[test]
    fn the_order_channels_are_given_in_changes_nothing() {
        let mut channels: Vec<(&str, &[&str])> = vec![
            ("events", &["iot/+/+/events/#"]),
            ("alarms", &["iot/hq/+/events/alarms"]),
            ("site", &["iot/+/gw/#"]),
            ("bare", &["iot"]),
        ];
        let topics = [
            "iot/hq/d1/events/alarms",
            "iot/north/gw/events/alarms",
            "iot/hq/gw/x",
            "iot",
            "iot/x",
        ];
        let forward = claims(&channels);
        let expected: Vec<&str> = topics.iter().map(|t| holder(&forward, t)).collect();
        channels.reverse();
        let backward = claims(&channels);
        let got: Vec<&str> = topics.iter().map(|t| holder(&backward, t)).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn expansions_are_separate_filters_of_one_channel() {
        let c = claims(&[("weather", &["iot/weather/+/data", "iot/weather/+/events"])]);
        let claim = c.claim_for_topic("iot/weather/st-3/events").unwrap();
        assert_eq!(
            claim,
            Claim {
                channel: 0,
                filter: 1
            }
        );
        assert_eq!(c.filter(claim), "iot/weather/+/events");
        assert_eq!(c.channel_for_topic("iot/weather/st-3/status"), None);
    }

    #[test]
    fn a_channel_without_a_filter_claims_its_name() {
        let c = claims(&[("events", &["events/#"])]);
        assert_eq!(holder(&c, "events"), "events");
        assert_eq!(holder(&c, "events/orders/123"), "events");
        assert_eq!(holder(&c, "eventsx/1"), "-");
    }

    #[test]
    fn dollar_topics_are_never_claimed() {
        // A configuration refuses such filters; the claims hold to the
        // rule even if handed one.
        let c = claims(&[("bad", &["$SYS/#"]), ("all", &["#"]), ("top", &["+"])]);
        assert_eq!(c.channel_for_topic("$SYS/uptime"), None);
        assert_eq!(c.channel_for_topic("$saguin/x"), None);
        assert_eq!(holder(&c, "x"), "top");
        assert_eq!(holder(&c, "x/y"), "all");
        assert_eq!(c.channel_for_topic(""), None);
    }

    #[test]
    fn a_shadowed_filter_claims_nothing() {
        // Every topic `a/#` matches is held by something more exact.
        let c = claims(&[
            ("shadowed", &["a/#"]),
            ("parent", &["a"]),
            ("children", &["a/+/#"]),
        ]);
        for topic in ["a", "a/b", "a/b/c", "a/x/y/z"] {
            assert_ne!(holder(&c, topic), "shadowed", "{topic}");
        }
        assert_eq!(reached(&c, "a/#"), (vec!["parent", "children"], false));
        assert_eq!(reached(&c, "#"), (vec!["parent", "children"], true));
    }

    #[test]
    fn the_widest_filters_reach_every_channel_and_broadcast() {
        let c = water_and_weather();
        let all = vec!["water-location", "water-measurement", "weather-measurement"];
        assert_eq!(reached(&c, "#"), (all.clone(), true));
        assert_eq!(reached(&c, "iot/#"), (all, true));
        assert_eq!(reached(&c, "+/#"), reached(&c, "#"));
        assert_eq!(reached(&c, "+"), (vec![], true));
    }

    #[test]
    fn filters_reach_what_the_rfc_table_says() {
        let c = water_and_weather();
        // The device's location only: the measurement filter matches that
        // topic too, but does not hold it.
        assert_eq!(
            reached(&c, "iot/water/w-7/location"),
            (vec!["water-location"], false)
        );
        assert_eq!(
            reached(&c, "iot/water/+/location/#"),
            (vec!["water-location"], false)
        );
        // Location as state, readings as records, `iot/water/w-7` itself
        // live: `+/#` needs a fourth level.
        assert_eq!(
            reached(&c, "iot/water/w-7/#"),
            (vec!["water-location", "water-measurement"], true)
        );
        assert_eq!(
            reached(&c, "iot/water/w-7/+"),
            (vec!["water-location", "water-measurement"], false)
        );
        assert_eq!(reached(&c, "iot/weather/st-3/data/raw"), (vec![], true));
        assert_eq!(
            reached(&c, "iot/+/+/data"),
            (vec!["water-measurement", "weather-measurement"], true)
        );
        // A filter matching nothing yet reaches broadcast, where whatever
        // it was written for will arrive.
        assert_eq!(reached(&c, "nothing/here/yet"), (vec![], true));
    }

    #[test]
    fn dollar_filters_reach_broadcast_only() {
        let c = claims(&[("all", &["a/#"]), ("dollar", &["$x/#"])]);
        assert_eq!(reached(&c, "$x/#"), (vec![], true));
        assert_eq!(reached(&c, "$SYS/uptime"), (vec![], true));
        assert_eq!(reached(&c, "#"), (vec!["all"], true));
    }

    #[test]
    fn a_level_no_filter_spells_is_still_considered() {
        // `+` at level two reaches `wide` through every level `hq` is not.
        let c = claims(&[("hq", &["s/hq"]), ("wide", &["s/+"])]);
        assert_eq!(reached(&c, "s/+"), (vec!["hq", "wide"], false));
        assert_eq!(reached(&c, "s/hq"), (vec!["hq"], false));
        assert_eq!(reached(&c, "s/#"), (vec!["hq", "wide"], true));
    }

    #[test]
    fn a_hash_filter_past_every_claim_lands_with_its_prefix() {
        let c = claims(&[("deep", &["a/#"]), ("exact", &["a/b/c"])]);
        assert_eq!(reached(&c, "a/b/c/#"), (vec!["deep", "exact"], false));
        assert_eq!(reached(&c, "a/b/c/d/#"), (vec!["deep"], false));
        assert_eq!(reached(&c, "b/#"), (vec![], true));
    }

    #[test]
    fn invalid_filters_reach_nothing() {
        let c = water_and_weather();
        for filter in ["", "a/#/b", "a+", "#/"] {
            assert_eq!(c.reach(filter), Reach::default(), "{filter}");
        }
    }

    #[test]
    fn duplicates_go_to_the_channel_given_first() {
        let c = claims(&[("first", &["a/b"]), ("second", &["a/b"])]);
        assert_eq!(holder(&c, "a/b"), "first");
        assert_eq!(reached(&c, "#"), (vec!["first"], true));
    }

    /// The rule as the RFC states it, applied pairwise to every matching
    /// filter: the reference the trie is checked against.
    fn naive_holder(channels: &[(String, Vec<String>)], topic: &str) -> Option<usize> {
        use crate::codec::topic::matches;
        use std::cmp::Ordering;
        // Spelled out beats `+` and `#`; `+`, and a filter ending here, beat `#`.
        let rank = |level: Option<&str>| match level {
            Some("#") => 2,
            Some("+") | None => 1,
            Some(_) => 0,
        };
        let more_exact = |a: &str, b: &str| -> Ordering {
            let (mut a, mut b) = (a.split('/'), b.split('/'));
            loop {
                match (a.next(), b.next()) {
                    (None, None) => return Ordering::Equal,
                    (x, y) if x == y => {}
                    (x, y) => return rank(x).cmp(&rank(y)),
                }
            }
        };
        if topic.starts_with('$') {
            return None;
        }
        channels
            .iter()
            .enumerate()
            .flat_map(|(i, (_, fs))| fs.iter().map(move |f| (i, f)))
            .filter(|(_, f)| matches(f, topic))
            .min_by(|(i, a), (j, b)| more_exact(a, b).then(i.cmp(j)))
            .map(|(i, _)| i)
    }

    /// A small deterministic generator, so the check needs no dependency.
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    fn random_filter(rng: &mut Lcg, first_spelled: bool) -> String {
        const LEVELS: [&str; 5] = ["a", "b", "c", "+", "#"];
        let depth = 1 + rng.below(4);
        let mut levels = Vec::new();
        for i in 0..depth {
            let choices = if i == 0 && first_spelled { 3 } else { 5 };
            let level = LEVELS[rng.below(choices)];
            levels.push(level);
            if level == "#" {
                break;
            }
        }
        levels.join("/")
    }

    /// Every topic of one to five levels over `a`, `b`, `c` and `z`, the
    /// last spelled by no filter.
    fn universe() -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        let mut layer: Vec<String> = vec![String::new()];
        for _ in 0..5 {
            layer = layer
                .iter()
                .flat_map(|t| {
                    ["a", "b", "c", "z"].map(|l| {
                        if t.is_empty() {
                            l.to_string()
                        } else {
                            format!("{t}/{l}")
                        }
                    })
                })
                .collect();
            all.extend(layer.iter().cloned());
        }
        all
    }

    #[test]
    fn the_trie_agrees_with_the_rule_as_written() {
        let topics = universe();
        let mut rng = Lcg(7);
        for _ in 0..150 {
            let count = 1 + rng.below(5);
            let channels: Vec<(String, Vec<String>)> = (0..count)
                .map(|i| {
                    let filters = (0..1 + rng.below(2))
                        .map(|_| random_filter(&mut rng, true))
                        .collect();
                    (format!("ch{i}"), filters)
                })
                .collect();
            let refs: Vec<(&str, &[String])> = channels
                .iter()
                .map(|(n, f)| (n.as_str(), f.as_slice()))
                .collect();
            let c = Claims::new(&refs);
            let holders: Vec<Option<usize>> =
                topics.iter().map(|t| naive_holder(&channels, t)).collect();
            for (topic, expected) in topics.iter().zip(&holders) {
                assert_eq!(
                    c.channel_for_topic(topic),
                    *expected,
                    "{topic} under {channels:?}"
                );
            }
            for _ in 0..10 {
                let filter = random_filter(&mut rng, false);
                let mut expected = Reach::default();
                for (topic, holder) in topics.iter().zip(&holders) {
                    if crate::codec::topic::matches(&filter, topic) {
                        match holder {
                            Some(i) => expected.channels.push(*i),
                            None => expected.broadcast = true,
                        }
                    }
                }
                expected.channels.sort_unstable();
                expected.channels.dedup();
                assert_eq!(c.reach(&filter), expected, "{filter} under {channels:?}");
            }
        }
    }
}
