//! `latest` channels in the core, on simulated time and a recording
//! transport: what is written when, what waits, and what a resume re-sends.

use super::*;
use crate::core::latest::{LatestSettings, StoredValue};
use crate::store::{Answer, MessageId, Outcome, Write};

fn state_channel(retention_period_s: Option<u64>, deletions_s: Option<u64>) -> Settings {
    Settings {
        channels: vec![ChannelSettings {
            name: "state".into(),
            filters: vec!["state/#".into()],
            provider: 0,
            start: ChannelStart::Floor,
            max_bytes: None,
            retention_period_s,
            retention_bytes: None,
            next: 1,
            floor: 1,
            written_filter: "state/#".into(),
            latest: Some(LatestSettings {
                deletion_retention_period_s: deletions_s,
                values: Vec::new(),
            }),
            queue: None,
        }],
        ..Settings::default()
    }
}

fn set(h: &mut Harness, conn: Key, topic: &str, payload: &[u8], packet_id: u16) {
    let publish = publish_packet(topic, QoS::AtLeastOnce, Some(packet_id), payload);
    h.packet(conn, Packet::Publish(publish));
}

/// The offsets the queued writes remove, draining every request.
fn removals(h: &mut Harness) -> Vec<u64> {
    h.stored()
        .into_iter()
        .flat_map(|r| match r {
            StoreRequest::Commit { writes, .. } => writes,
            _ => vec![],
        })
        .filter_map(|w| match w {
            Write::Remove { offset, .. } => Some(offset),
            _ => None,
        })
        .collect()
}

fn connect_durable(h: &mut Harness, client_id: &str, receive_maximum: u16) -> (Key, bool) {
    let mut connect = connect_packet(client_id, ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(600);
    connect.properties.receive_maximum = Some(receive_maximum);
    let (conn, connack) = h.connect_with(connect);
    (conn, connack.session_present)
}

#[test]
fn a_value_is_acknowledged_after_its_commit_and_the_one_it_replaced_is_removed_after() {
    let mut h = Harness::new(state_channel(None, None));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/a", b"1", 1);
    assert!(
        h.out.take(publisher).is_empty(),
        "no PUBACK before the commit"
    );
    h.commit_appends(1);
    assert_eq!(acks(&h.out.take(publisher)), [(1, ReasonCode::SUCCESS)]);
    assert!(removals(&mut h).is_empty(), "nothing replaced yet");

    set(&mut h, publisher, "state/a", b"2", 2);
    // The new value names the record it replaces, for the store to remove
    // in the same write: a full provider still takes a value no larger.
    let replaces: Vec<u64> = h
        .out
        .stored
        .iter()
        .flat_map(|(_, r)| match r {
            StoreRequest::Commit { writes, .. } => writes.clone(),
            _ => vec![],
        })
        .filter_map(|w| match w {
            Write::Replace { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    assert_eq!(replaces, [1]);
    h.commit_appends(2);
    assert_eq!(acks(&h.out.take(publisher)), [(2, ReasonCode::SUCCESS)]);
    // A value whose write found its predecessor already gone (another value
    // of the topic in between) is a plain append: the removal after the
    // commit covers that case, and finds nothing here.
    assert_eq!(removals(&mut h), [1]);
}

#[test]
fn a_refused_value_leaves_the_current_one_in_place() {
    let mut h = Harness::new(state_channel(None, None));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/a", b"1", 1);
    h.commit_appends(1);
    h.out.take(publisher);
    set(&mut h, publisher, "state/a", b"2", 2);
    for request in h.stored() {
        if let StoreRequest::Commit { ticket, .. } = request {
            let refused = Outcome::Refused(crate::store::Refusal::ProviderFull);
            h.complete(ticket, Answer::Committed(Ok(vec![refused])));
        }
    }
    assert_eq!(
        acks(&h.out.take(publisher)),
        [(2, ReasonCode::QUOTA_EXCEEDED)]
    );
    assert!(removals(&mut h).is_empty());
    let reader = h.connect("reader", ProtocolVersion::V5);
    h.subscribe(reader, "state/#", qos(QoS::AtLeastOnce), None);
    let packets = h.out.take(reader);
    let values = publishes(&packets);
    assert_eq!(values.len(), 1);
    assert_eq!(values[0].payload, b"1");
}

#[test]
fn a_deletion_is_stored_only_when_there_is_something_to_delete() {
    let mut h = Harness::new(state_channel(None, None));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/never", b"", 1);
    assert_eq!(acks(&h.out.take(publisher)), [(1, ReasonCode::SUCCESS)]);
    assert!(h.stored().is_empty(), "nothing stored for an absent topic");

    // A value still on its way to storage is something to delete.
    set(&mut h, publisher, "state/a", b"1", 2);
    set(&mut h, publisher, "state/a", b"", 3);
    let appended: Vec<Vec<u8>> = h.commit_appends(1).into_iter().map(|m| m.payload).collect();
    assert_eq!(appended, [b"1".to_vec(), Vec::new()]);
    assert_eq!(removals(&mut h), [1]);
    set(&mut h, publisher, "state/a", b"", 4);
    assert!(
        h.stored().is_empty(),
        "already deleted: nothing more to say"
    );
}

#[test]
fn waiting_values_coalesce_and_a_subscriber_never_goes_back() {
    let mut h = Harness::new(state_channel(None, None));
    let (subscriber, _) = connect_durable(&mut h, "slow", 1);
    h.subscribe(subscriber, "state/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for (i, payload) in [b"1", b"2", b"3"].iter().enumerate() {
        set(&mut h, publisher, "state/a", *payload, i as u16 + 1);
    }
    h.commit_appends(1);
    assert_eq!(
        acks(&h.out.take(publisher)).len(),
        3,
        "the publisher waited for nobody"
    );
    let packets = h.out.take(subscriber);
    let first = publishes(&packets);
    assert_eq!(first.len(), 1, "Receive Maximum 1");
    assert_eq!(first[0].payload, b"1");
    let ack = PubAck {
        packet_id: first[0].packet_id.unwrap(),
        ..PubAck::default()
    };
    h.packet(subscriber, Packet::Puback(ack));
    let packets = h.out.take(subscriber);
    let next = publishes(&packets);
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].payload, b"3",
        "the newest, never the one in between"
    );
}

#[test]
fn a_replaced_value_a_session_holds_is_withdrawn_before_its_resume() {
    let mut h = Harness::new(state_channel(None, None));
    let (subscriber, _) = connect_durable(&mut h, "device", 10);
    h.subscribe(subscriber, "state/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/a", b"old", 1);
    set(&mut h, publisher, "state/b", b"kept", 2);
    h.commit_appends(1);
    assert_eq!(
        publishes(&h.out.take(subscriber)).len(),
        2,
        "both on the wire"
    );
    // Gone without acknowledging either; a newer value replaces one.
    h.broker
        .handle_connection_lost(subscriber, h.now_ms, &mut h.out);
    set(&mut h, publisher, "state/a", b"new", 3);
    h.commit_appends(3);

    let (subscriber, present) = connect_durable(&mut h, "device", 10);
    assert!(present);
    let packets = h.out.take(subscriber);
    let sent: Vec<(&[u8], bool)> = publishes(&packets)
        .iter()
        .map(|p| (p.payload.as_slice(), p.dup))
        .collect();
    assert_eq!(
        sent,
        [(&b"kept"[..], true), (&b"new"[..], false)],
        "the replaced value is never re-sent; the current one follows"
    );
}

#[test]
fn the_sweep_removes_values_and_deletions_each_on_its_own_clock() {
    let mut settings = state_channel(Some(10), Some(2));
    if let Some(latest) = settings.channels[0].latest.as_mut() {
        latest.values = vec![
            StoredValue {
                topic: "state/value".into(),
                offset: 1,
                received_at_ms: 1_000,
                deleted: false,
            },
            StoredValue {
                topic: "state/deleted".into(),
                offset: 2,
                received_at_ms: 1_000,
                deleted: true,
            },
        ];
        settings.channels[0].next = 3;
    }
    let mut h = Harness::new(settings);
    h.advance(0);
    assert!(removals(&mut h).is_empty(), "nothing is old at startup");
    // The age sweep runs every second here (a tenth of 2s, floored at 1s);
    // the deletion is older than 2s once more than 2s have passed.
    h.advance(2_000);
    assert!(removals(&mut h).is_empty(), "exactly 2s old is not older");
    h.advance(1_000);
    let mut requests = h.stored();
    assert_eq!(requests.len(), 1);
    let StoreRequest::Commit { ticket, writes } = requests.remove(0) else {
        panic!("expected a commit");
    };
    assert_eq!(
        writes,
        [Write::Remove {
            channel: "state".into(),
            offset: 2
        }]
    );
    let removed = Outcome::Removed {
        existed: true,
        freed_bytes: 80,
        floor: 1,
    };
    h.complete(ticket, Answer::Committed(Ok(vec![removed])));
    h.advance(7_000);
    assert!(
        removals(&mut h).is_empty(),
        "the value's period has not passed"
    );
    h.advance(1_000);
    assert_eq!(removals(&mut h), [1]);
}

#[test]
fn a_removal_storage_could_not_take_is_tried_again_at_the_next_tick() {
    let mut h = Harness::new(state_channel(None, None));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/a", b"1", 1);
    h.commit_appends(1);
    set(&mut h, publisher, "state/a", b"2", 2);
    let mut requests = h.stored();
    let Some(StoreRequest::Commit { ticket, .. }) = requests.pop() else {
        panic!("expected the append");
    };
    h.out.storage_busy = true;
    h.complete(
        ticket,
        Answer::Committed(Ok(vec![Outcome::Appended { offset: 2 }])),
    );
    assert_eq!(acks(&h.out.take(publisher)).len(), 2);
    h.out.storage_busy = false;
    assert!(removals(&mut h).is_empty());
    h.advance(1_000);
    assert_eq!(removals(&mut h), [1]);
}

#[test]
fn startup_values_are_held_once_by_the_index() {
    let mut settings = state_channel(None, None).channels.remove(0);
    if let Some(latest) = settings.latest.as_mut() {
        latest.values.push(StoredValue {
            topic: "state/a".into(),
            offset: 1,
            received_at_ms: 1,
            deleted: false,
        });
    }
    let moved = crate::core::latest::moved_out(&mut settings);
    assert!(settings.latest.as_ref().unwrap().values.is_empty());
    assert_eq!(moved.latest.as_ref().unwrap().values.len(), 1);
}

#[test]
fn a_value_too_large_for_the_subscriber_holds_its_resume_until_a_new_subscribe() {
    let mut h = Harness::new(state_channel(None, None));
    let mut connect = connect_packet("small", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(600);
    connect.properties.maximum_packet_size = Some(200);
    let (subscriber, _) = h.connect_with(connect.clone());
    h.subscribe(subscriber, "state/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/big", &[7; 500], 1);
    set(&mut h, publisher, "state/small", b"1", 2);
    h.commit_appends(1);
    let packets = h.out.take(subscriber);
    let sent = publishes(&packets);
    assert_eq!(sent.len(), 1, "the large value is not sent");
    assert_eq!(sent[0].topic, "state/small");
    assert_eq!(h.broker.stats().deliveries_too_large, 1);
    let ack = PubAck {
        packet_id: sent[0].packet_id.unwrap(),
        ..PubAck::default()
    };
    h.packet(subscriber, Packet::Puback(ack));

    // The large topic is set again, small enough now, and delivered live.
    set(&mut h, publisher, "state/big", b"ok", 3);
    h.commit_appends(3);
    let acknowledge_all = |h: &mut Harness, subscriber: Key| {
        let packets = h.out.take(subscriber);
        let sent: Vec<&Publish> = publishes(&packets);
        let topics: Vec<String> = sent.iter().map(|p| p.topic.clone()).collect();
        for p in sent {
            let ack = PubAck {
                packet_id: p.packet_id.unwrap(),
                ..PubAck::default()
            };
            h.packet(subscriber, Packet::Puback(ack));
        }
        topics
    };
    assert_eq!(acknowledge_all(&mut h, subscriber), ["state/big"]);
    let resume = |h: &mut Harness, subscriber: Key| {
        h.broker
            .handle_connection_lost(subscriber, h.now_ms, &mut h.out);
        let (subscriber, connack) = h.connect_with(connect.clone());
        assert!(connack.session_present);
        subscriber
    };
    // Everything acknowledged, yet a resume starts below the value it
    // never got, and re-sends what it already holds.
    let subscriber = resume(&mut h, subscriber);
    assert_eq!(
        acknowledge_all(&mut h, subscriber),
        ["state/small", "state/big"]
    );
    // A new SUBSCRIBE serves the whole state and clears the mark.
    h.subscribe(subscriber, "state/#", qos(QoS::AtLeastOnce), None);
    assert_eq!(acknowledge_all(&mut h, subscriber).len(), 2);
    let subscriber = resume(&mut h, subscriber);
    assert!(acknowledge_all(&mut h, subscriber).is_empty());
}

/// A value as a provider returns it.
fn record(offset: u64, topic: &str, payload: &[u8]) -> crate::store::Record {
    crate::store::Record {
        offset,
        message: crate::store::Message::new(
            MessageId::from_publisher(&format!("v{offset}")),
            1_000,
            topic.into(),
            payload.to_vec(),
        ),
    }
}

#[test]
fn a_state_pass_is_a_cursor_over_stored_values_read_in_batches() {
    const TOPICS: u64 = 1_000;
    let mut settings = state_channel(None, None);
    if let Some(latest) = settings.channels[0].latest.as_mut() {
        latest.values = (1..=TOPICS)
            .map(|offset| StoredValue {
                topic: format!("state/t{offset}"),
                offset,
                received_at_ms: 1_000,
                deleted: false,
            })
            .collect();
        settings.channels[0].next = TOPICS + 1;
    }
    let mut h = Harness::new(settings);
    let (subscriber, _) = connect_durable(&mut h, "dashboard", 1);
    h.subscribe(subscriber, "state/#", qos(QoS::AtLeastOnce), None);
    // Nothing is copied per topic: one cursor, and nothing waiting.
    let reader = h.broker.latest_readers.iter().next().unwrap().1;
    assert_eq!(reader.held(), (1, 0));
    // The bodies are not in memory after a restart: they are read.
    let mut requests = h.stored();
    let Some(StoreRequest::Read {
        ticket,
        from_offset: 1,
        ..
    }) = requests.pop()
    else {
        panic!("expected a read from offset 1, got {requests:?}");
    };
    let batch = (1..=64)
        .map(|o| record(o, &format!("state/t{o}"), b"v"))
        .collect();
    h.complete(
        ticket,
        Answer::Read(Ok(crate::store::Read::Records(crate::store::ReadBatch {
            floor: 1,
            next: TOPICS + 1,
            records: batch,
        }))),
    );
    for expected in 1..=64u64 {
        let packets = h.out.take(subscriber);
        let sent = publishes(&packets);
        assert_eq!(sent.len(), 1, "Receive Maximum 1");
        assert_eq!(sent[0].topic, format!("state/t{expected}"));
        assert!(sent[0].retain);
        let ack = PubAck {
            packet_id: sent[0].packet_id.unwrap(),
            ..PubAck::default()
        };
        h.packet(subscriber, Packet::Puback(ack));
    }
    let mut requests = h.stored();
    assert!(
        matches!(
            requests.pop(),
            Some(StoreRequest::Read {
                from_offset: 65,
                ..
            })
        ),
        "one read per batch, the next from where the last ended"
    );
}

/// A deletion is the only thing standing between a restart and the value
/// it replaced while that value's removal is outstanding: the sweep must
/// not take the deletion first, or a restart would bring the old value back.
#[test]
fn a_deletion_outlives_the_removal_of_the_value_it_replaced() {
    let mut h = Harness::new(state_channel(None, Some(2)));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    set(&mut h, publisher, "state/a", b"1", 1);
    h.commit_appends(1);
    set(&mut h, publisher, "state/a", b"", 2);
    let mut requests = h.stored();
    let Some(StoreRequest::Commit { ticket, .. }) = requests.pop() else {
        panic!("expected the deletion's append");
    };
    // Storage cannot take the removal of value 1 now: it is kept to retry.
    h.out.storage_busy = true;
    h.complete(
        ticket,
        Answer::Committed(Ok(vec![Outcome::Appended { offset: 2 }])),
    );
    h.out.storage_busy = false;
    for _ in 0..6 {
        h.advance(1_000);
        for request in h.stored() {
            let StoreRequest::Commit { ticket, writes } = request else {
                continue;
            };
            let removes = |o: u64| {
                writes
                    .iter()
                    .any(|w| matches!(w, Write::Remove { offset, .. } if *offset == o))
            };
            assert!(
                !removes(2) || removes(1),
                "the deletion was removed while the value it replaced may still be stored"
            );
            // The retried removal keeps failing.
            h.complete(
                ticket,
                Answer::Committed(Err(crate::store::StoreError::Database {
                    path: "state.redb".into(),
                    action: "commit",
                    detail: "disk".into(),
                })),
            );
        }
    }
    // Once the removal is confirmed, the deletion's own period applies.
    h.advance(1_000);
    for request in h.stored() {
        if let StoreRequest::Commit { ticket, writes } = request {
            assert_eq!(
                writes,
                [Write::Remove {
                    channel: "state".into(),
                    offset: 1
                }]
            );
            let removed = Outcome::Removed {
                existed: true,
                freed_bytes: 80,
                floor: 2,
            };
            h.complete(ticket, Answer::Committed(Ok(vec![removed])));
        }
    }
    h.advance(1_000);
    assert_eq!(removals(&mut h), [2]);
}

/// A subscriber that has fallen behind while every topic moves holds a
/// bounded number of changes, and is still sent every topic's value, as a
/// change (no RETAIN), lowest offset first.
#[test]
fn the_changes_a_slow_subscriber_holds_are_bounded_and_none_is_lost() {
    use crate::core::channel::latest::reader::WAITING_CHANGES_MAX;
    let topics = 3 * WAITING_CHANGES_MAX as u64;
    let mut h = Harness::new(state_channel(None, None));
    let (subscriber, _) = connect_durable(&mut h, "slow", 1);
    h.subscribe(subscriber, "state/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let mut next = 1u64;
    while next <= topics {
        let last = (next + 9).min(topics);
        for offset in next..=last {
            let packet_id = (offset - next + 1) as u16;
            set(
                &mut h,
                publisher,
                &format!("state/t{offset}"),
                b"v",
                packet_id,
            );
        }
        h.commit_appends(next);
        h.out.take(publisher);
        next = last + 1;
        let reader = h.broker.latest_readers.iter().next().unwrap().1;
        assert!(
            reader.held().1 <= WAITING_CHANGES_MAX,
            "a slow subscriber holds at most {WAITING_CHANGES_MAX} changes"
        );
    }
    let mut received = Vec::new();
    for _ in 0..10 * topics {
        for request in h.stored() {
            let StoreRequest::Read {
                ticket,
                from_offset,
                ..
            } = request
            else {
                continue;
            };
            let last = (from_offset + 63).min(topics);
            let records = (from_offset..=last)
                .map(|o| record(o, &format!("state/t{o}"), b"v"))
                .collect();
            let batch = crate::store::ReadBatch {
                floor: 1,
                next: topics + 1,
                records,
            };
            h.complete(ticket, Answer::Read(Ok(crate::store::Read::Records(batch))));
        }
        let packets = h.out.take(subscriber);
        let sent = publishes(&packets);
        if sent.is_empty() {
            break;
        }
        for publish in sent {
            assert!(!publish.retain, "a change, not state");
            let offset: u64 = label(publish, "saguin-offset").unwrap().parse().unwrap();
            assert_eq!(publish.topic, format!("state/t{offset}"));
            received.push(offset);
            let ack = PubAck {
                packet_id: publish.packet_id.unwrap(),
                ..PubAck::default()
            };
            h.packet(subscriber, Packet::Puback(ack));
        }
    }
    assert_eq!(received, (1..=topics).collect::<Vec<_>>());
}

/// Answers every queued commit as a store that kept it would.
fn answer_commits(h: &mut Harness) -> Vec<Vec<Write>> {
    let mut answered = Vec::new();
    for request in h.stored() {
        let StoreRequest::Commit { ticket, writes } = request else {
            continue;
        };
        let outcomes = writes
            .iter()
            .map(|w| match w {
                Write::PutEntry { .. } => Outcome::EntryPut,
                Write::DropEntry { .. } => Outcome::EntryDropped { existed: true },
                // A new durable session's record drops any earlier cursor.
                Write::DropPosition { .. } => Outcome::PositionDropped { existed: false },
                other => panic!("unexpected write {other:?}"),
            })
            .collect();
        h.complete(ticket, Answer::Committed(Ok(outcomes)));
        answered.push(writes);
    }
    answered
}

/// A deletion of nothing stores nothing, but an exactly-once release of one
/// still has a stored hold to remove: until that removal is stored a
/// restart would find the identifier held, and take the client's next
/// publish under it for a resend. The PUBCOMP waits for it (invariant 18).
#[test]
fn an_exactly_once_deletion_of_nothing_is_completed_once_its_hold_is_gone() {
    let mut settings = state_channel(None, None);
    settings.session_provider = Some(0);
    let mut h = Harness::new(settings);
    let conn = h.open();
    let mut connect = connect_packet("pub", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(600);
    h.packet(conn, Packet::Connect(Box::new(connect)));
    answer_commits(&mut h);
    assert!(matches!(h.out.take(conn).as_slice(), [Packet::Connack(_)]));
    let publish = publish_packet("state/never", QoS::ExactlyOnce, Some(7), b"");
    h.packet(conn, Packet::Publish(publish));
    answer_commits(&mut h);
    assert!(matches!(h.out.take(conn).as_slice(), [Packet::Pubrec(_)]));

    let release = PubAck {
        packet_id: 7,
        ..PubAck::default()
    };
    h.packet(conn, Packet::Pubrel(release));
    assert!(
        h.out.take(conn).is_empty(),
        "PUBCOMP before the hold's removal was stored"
    );
    let answered = answer_commits(&mut h);
    assert!(
        matches!(answered.as_slice(), [w] if matches!(w.as_slice(), [Write::DropEntry { .. }])),
        "{answered:?}"
    );
    assert!(matches!(h.out.take(conn).as_slice(),
        [Packet::Pubcomp(ack)] if ack.packet_id == 7 && ack.reason_code == ReasonCode::SUCCESS));
}

/// Defect: a `latest` value whose publisher's Message Expiry had run out
/// was left out of a state pass; a channel keeps it readable, delivered
/// without the property (invariant 2).
#[test]
fn an_expired_value_is_still_served_as_state_without_its_expiry() {
    let mut h = Harness::new(state_channel(None, None));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let mut publish = publish_packet("state/a", QoS::AtLeastOnce, Some(1), b"on");
    publish.properties.message_expiry_interval_s = Some(1);
    h.packet(publisher, Packet::Publish(publish));
    h.commit_appends(1);
    h.advance(5_000);
    let reader = h.connect("reader", ProtocolVersion::V5);
    h.subscribe(reader, "state/#", qos(QoS::AtLeastOnce), None);
    let packets = h.out.take(reader);
    let values = publishes(&packets);
    assert_eq!(values.len(), 1, "{packets:?}");
    assert_eq!(values[0].payload, b"on");
    assert_eq!(values[0].properties.message_expiry_interval_s, None);
}

/// Defect: a point read of a value whose publisher's Message Expiry had
/// run out was answered as if the topic held none.
#[test]
fn a_point_read_of_an_expired_value_answers_the_value_without_its_expiry() {
    let mut h = Harness::new(state_channel(None, None));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let mut publish = publish_packet("state/a", QoS::AtLeastOnce, Some(1), b"on");
    publish.properties.message_expiry_interval_s = Some(1);
    h.packet(publisher, Packet::Publish(publish));
    h.commit_appends(1);
    h.advance(5_000);
    let asker = h.connect("asker", ProtocolVersion::V5);
    let mut read = publish_packet("$saguin/kv/get", QoS::AtLeastOnce, Some(2), b"state/a");
    read.properties.response_topic = Some("answers".into());
    h.packet(asker, Packet::Publish(read));
    let packets = h.out.take(asker);
    let answers = publishes(&packets);
    assert_eq!(answers.len(), 1, "{packets:?}");
    assert_eq!(answers[0].topic, "answers");
    assert_eq!(answers[0].payload, b"on");
    assert_eq!(answers[0].properties.message_expiry_interval_s, None);
}
