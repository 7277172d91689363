//! What the core counts for the metrics catalogue: refusals by the reason
//! their client was answered with, and deliveries a full session refused.

use super::*;

fn counted(counts: &crate::core::refusal_counts::ReasonCounts) -> Vec<(&'static str, u64)> {
    counts.nonzero().collect()
}

#[test]
fn refusals_are_counted_by_the_reason_their_client_was_answered_with() {
    let settings = Settings {
        max_topic_length: 8,
        max_client_id_length: 8,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let five = h.connect("five", ProtocolVersion::V5);
    let long_topic = || publish_packet("much/too/long", QoS::AtLeastOnce, Some(5), b"x");
    h.packet(five, Packet::Publish(long_topic()));
    h.out.take(five);
    let codes = h.subscribe(five, "$SYS/#", qos(QoS::AtMostOnce), None);
    assert_eq!(codes, [ReasonCode::NOT_AUTHORIZED]);
    // A 3.1.1 publisher cannot be told: its connection ends, counted as a
    // connection refused for the publish's reason.
    let three = h.connect("three", ProtocolVersion::V311);
    h.packet(three, Packet::Publish(long_topic()));
    assert!(!h.broker.is_open(three));
    let (_, connack) = h.connect_with(connect_packet("far-too-long", ProtocolVersion::V5));
    assert_eq!(connack.reason_code, ReasonCode::CLIENT_IDENTIFIER_NOT_VALID);
    // A broker stopping ends connections without refusing anybody.
    h.broker.shutdown(h.now_ms, &mut h.out);

    let stats = h.broker.stats();
    assert_eq!(counted(&stats.publish_refused), [("topic name invalid", 2)]);
    assert_eq!(
        counted(&stats.subscriptions_refused),
        [("not authorized", 1)]
    );
    assert_eq!(
        counted(&stats.connections_refused),
        [
            ("client identifier not valid", 1),
            ("topic name invalid", 1)
        ]
    );
}

#[test]
fn a_delivery_a_full_session_cannot_hold_is_counted_refused() {
    let settings = Settings {
        session_queue_bytes: 1000,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let subscriber = h.connect("slow", ProtocolVersion::V5);
    h.subscribe(subscriber, "t", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    // One large delivery goes on the wire, however large; nothing waits
    // beside it that could be given up, so the next is refused.
    for size in [850, 100] {
        h.packet(
            publisher,
            Packet::Publish(publish_packet(
                "t",
                QoS::AtLeastOnce,
                Some(1),
                &vec![1; size],
            )),
        );
    }
    assert_eq!(publishes(&h.out.take(subscriber)).len(), 1);
    let stats = h.broker.stats();
    assert_eq!(stats.deliveries_refused, 1);
    assert_eq!(stats.session_queue_full, 1);
}
