//! One client's grants, compiled from its entry at CONNECT, and the
//! questions the core asks of them.

use super::filter::{covers, intersect, substitute};
use super::{Acl, Features, Limits, Subject, Verbs};
use crate::codec::topic;

/// Maps a channel's name to the index the core files it under.
pub trait ChannelIndex {
    fn channel_count(&self) -> usize;
    fn index_of(&self, name: &str) -> Option<usize>;
    /// The channel's own filters, `{a,b}` expanded.
    fn filters_of(&self, channel: usize) -> &[String];
}

/// One channel rule, its filters with the client's names put in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChannelGrant {
    verbs: Verbs,
    /// `None`: the whole channel.
    filters: Option<Vec<String>>,
}

/// What one client may do, by channel, broadcast filter and facility.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grants {
    /// By channel index; most clients hold one or two rules on a channel.
    channels: Vec<Vec<ChannelGrant>>,
    /// Broadcast rules: a filter and what it allows.
    topics: Vec<(String, Verbs)>,
    sessions: Verbs,
    denies: Features,
    /// The entry's own publish bounds; `None` where it writes none.
    limits: Option<Limits>,
    /// Rules that grant this client nothing because a name it would put
    /// in holds topic syntax: (role, rule index, `%u` or `%c`).
    withheld: Vec<(String, usize, &'static str)>,
}

impl Grants {
    /// The grants `acl` gives `user` connecting as `client_id`. A name no
    /// entry matches is granted nothing.
    pub fn compile(acl: &Acl, user: &str, client_id: &str, index: &impl ChannelIndex) -> Grants {
        let mut grants = Grants {
            channels: vec![Vec::new(); index.channel_count()],
            ..Grants::default()
        };
        let Some(entry) = acl.entry_for(user) else {
            return grants;
        };
        grants.limits = entry.limits;
        for &role_index in &entry.roles {
            let role = &acl.roles[role_index];
            for (rule_index, rule) in role.rules.iter().enumerate() {
                let filters: Result<Vec<String>, _> = rule
                    .filters
                    .iter()
                    .map(|f| substitute(f, user, Some(client_id)))
                    .collect();
                let filters = match filters {
                    Ok(filters) => filters,
                    Err(withheld) => {
                        grants
                            .withheld
                            .push((role.name.clone(), rule_index, withheld.marker));
                        continue;
                    }
                };
                match &rule.subject {
                    Subject::Channel(name) => {
                        // A channel the file names is checked against the
                        // configuration at load; one missing here grants
                        // nothing rather than something else.
                        let Some(channel) = index.index_of(name) else {
                            continue;
                        };
                        let filters = (!filters.is_empty()).then_some(filters);
                        grants.channels[channel].push(ChannelGrant {
                            verbs: rule.verbs,
                            filters,
                        });
                    }
                    Subject::Topic => grants
                        .topics
                        .extend(filters.into_iter().map(|f| (f, rule.verbs))),
                    Subject::Sessions => grants.sessions = grants.sessions.with(rule.verbs),
                    Subject::Features => grants.denies = grants.denies.with(rule.denies),
                }
            }
        }
        grants
    }

    /// Every verb on every channel and broadcast topic, no feature denied,
    /// no bound: what the broker's own bridge sessions hold. Hanging up
    /// other sessions is not among them; a bridge never asks it.
    pub fn unrestricted(channel_count: usize) -> Grants {
        let verbs = Verbs::ALL
            .iter()
            .map(|(verb, _)| *verb)
            .filter(|verb| *verb != Verbs::DISCONNECT)
            .fold(Verbs::NONE, Verbs::with);
        let everywhere = ChannelGrant {
            verbs,
            filters: None,
        };
        Grants {
            channels: vec![vec![everywhere]; channel_count],
            topics: vec![("#".to_string(), verbs)],
            ..Grants::default()
        }
    }

    /// Whether `verb` is allowed on the topic `topic`, which resolves to
    /// `channel` (`None`: broadcast).
    pub fn allows(&self, verb: Verbs, channel: Option<usize>, topic_name: &str) -> bool {
        match channel {
            Some(channel) => self.channels.get(channel).is_some_and(|rules| {
                rules.iter().any(|grant| {
                    grant.verbs.contains(verb)
                        && grant.filters.as_ref().is_none_or(|filters| {
                            filters.iter().any(|f| topic::matches(f, topic_name))
                        })
                })
            }),
            None => self
                .topics
                .iter()
                .any(|(f, verbs)| verbs.contains(verb) && topic::matches(f, topic_name)),
        }
    }

    /// Whether `verb` is allowed on every topic `filter` reaches: on each
    /// channel in `channels` (those holding a topic it matches), and on
    /// broadcast where `broadcast` says it matches a topic no channel holds.
    /// A subscription is granted whole or not at all.
    pub fn allows_filter(
        &self,
        verb: Verbs,
        filter: &str,
        channels: &[usize],
        broadcast: bool,
        index: &impl ChannelIndex,
    ) -> bool {
        let channels_allowed = channels.iter().all(|&channel| {
            let Some(rules) = self.channels.get(channel) else {
                return false;
            };
            let rules: Vec<&ChannelGrant> =
                rules.iter().filter(|g| g.verbs.contains(verb)).collect();
            if rules.iter().any(|g| g.filters.is_none()) {
                return true;
            }
            // Every part of the channel the filter reaches lies inside one
            // of the rule filters.
            index.filters_of(channel).iter().all(|own| {
                intersect(filter, own).is_none_or(|part| {
                    rules.iter().any(|g| {
                        g.filters
                            .iter()
                            .flatten()
                            .any(|granted| covers(granted, &part))
                    })
                })
            })
        });
        channels_allowed
            && (!broadcast
                || self
                    .topics
                    .iter()
                    .any(|(f, verbs)| verbs.contains(verb) && covers(f, filter)))
    }

    /// Whether any rule on `channel` carries `verb`, whatever its filter.
    pub fn holds_on_channel(&self, verb: Verbs, channel: usize) -> bool {
        self.channels
            .get(channel)
            .is_some_and(|rules| rules.iter().any(|g| g.verbs.contains(verb)))
    }

    pub fn denies(&self, feature: Features) -> bool {
        self.denies.contains(feature)
    }

    pub fn denied_features(&self) -> Features {
        self.denies
    }

    pub fn may_disconnect(&self) -> bool {
        self.sessions.contains(Verbs::DISCONNECT)
    }

    pub fn limits(&self) -> Option<Limits> {
        self.limits
    }

    /// Rules withheld from this client: (role, rule index, marker).
    pub fn withheld(&self) -> &[(String, usize, &'static str)] {
        &self.withheld
    }
}
