"""Sagüin against the stock paho-mqtt client, MQTT 5 and 3.1.1.

Each test starts its own broker (see conftest.py). Absence is proven by
ordering, not by waiting: a marker message published after the event under
test arrives on the same session after anything the event caused, so
`collect_until(marker)` returning nothing means nothing was sent.
"""

import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from conftest import WAIT


def properties(packet_type, **values) -> Properties:
    result = Properties(packet_type)
    for name, value in values.items():
        setattr(result, name, value)
    return result


def publish_properties(**values) -> Properties:
    return properties(PacketTypes.PUBLISH, **values)


def prop(message_or_properties, name):
    """A property's value, or None when absent."""
    props = message_or_properties
    if isinstance(props, mqtt.MQTTMessage):
        props = props.properties
    return getattr(props, name, None) if props is not None else None


# 1. Publish properties and Subscription Identifiers


def test_publish_properties_pass_through_unchanged(broker, connect):
    sub = connect(broker, "props-sub")
    pub = connect(broker, "props-pub")
    assert sub.subscribe("props/#", qos=1) == [1]
    # Duplicate keys and their order are part of what MQTT 5 says to keep.
    user = [("k", "v1"), ("k", "v2"), ("a", "b"), ("k", "v1")]
    sent = publish_properties(
        UserProperty=user,
        ContentType="application/json",
        ResponseTopic="props/reply",
        CorrelationData=b"\x00\x01corr\xff",
        PayloadFormatIndicator=1,
    )
    assert pub.publish("props/x", '{"t": 21.5}', qos=1, properties=sent) == 0

    message = sub.expect()
    assert message.topic == "props/x"
    assert message.payload == b'{"t": 21.5}'
    assert prop(message, "UserProperty") == user
    assert prop(message, "ContentType") == "application/json"
    assert prop(message, "ResponseTopic") == "props/reply"
    assert prop(message, "CorrelationData") == b"\x00\x01corr\xff"
    assert prop(message, "PayloadFormatIndicator") == 1
    # Nothing of the publisher's hop leaks through.
    assert prop(message, "TopicAlias") is None
    assert prop(message, "SubscriptionIdentifier") is None


def test_subscription_identifier_is_delivered(broker, connect):
    sub = connect(broker, "sid-sub")
    pub = connect(broker, "sid-pub")
    assert pub.publish("si/retained", "kept", qos=1, retain=True) == 0
    assert sub.subscribe("si/#", subscription_id=7) == [0]
    # Both the retained value sent at subscribe and a live publish carry it.
    pub.publish("si/live", "hello")
    for topic in ("si/retained", "si/live"):
        message = sub.expect()
        assert message.topic == topic
        assert prop(message, "SubscriptionIdentifier") == [7]


def test_overlapping_subscriptions_get_one_copy_with_both_identifiers(broker, connect):
    sub = connect(broker, "overlap-sub")
    pub = connect(broker, "overlap-pub")
    assert sub.subscribe("a/#", subscription_id=1) == [0]
    assert sub.subscribe("a/+", subscription_id=2) == [0]
    pub.publish("a/b", "once")
    pub.publish("a/marker")  # matches both filters too
    before = sub.collect_until("a/marker")
    assert [m.payload for m in before] == [b"once"], "exactly one copy per session"
    assert sorted(prop(before[0], "SubscriptionIdentifier")) == [1, 2]


# 2. Message Expiry Interval


def test_retained_message_expiry_counts_down(broker, connect):
    pub = connect(broker, "exp-pub")
    expiry = publish_properties(MessageExpiryInterval=60)
    assert pub.publish("exp/long", "v", qos=1, retain=True, properties=expiry) == 0
    sub = connect(broker, "exp-sub")
    sub.subscribe("exp/#")
    message = sub.expect()
    assert message.topic == "exp/long" and message.retain
    # What is left of 60 s; the test runs well under 5 s.
    assert 55 <= prop(message, "MessageExpiryInterval") <= 60


def test_expired_retained_message_is_not_delivered(broker, connect):
    pub = connect(broker, "exp-pub")
    short = publish_properties(MessageExpiryInterval=1)
    long = publish_properties(MessageExpiryInterval=60)
    assert pub.publish("exp/short", "gone", qos=1, retain=True, properties=short) == 0
    assert pub.publish("exp/long", "kept", qos=1, retain=True, properties=long) == 0
    # The expiry itself is what is under test, so here time must pass.
    time.sleep(1.5)
    sub = connect(broker, "exp-sub")
    sub.subscribe("exp/#")
    pub.publish("exp/marker")
    before = sub.collect_until("exp/marker")
    assert [(m.topic, m.payload) for m in before] == [("exp/long", b"kept")]
    # The interval sent on is what is left after the wait, not the 60 s.
    assert 55 <= prop(before[0], "MessageExpiryInterval") <= 59


# 3. Retained messages


def test_retained_value_delivered_at_subscribe_and_deleted_by_empty_payload(broker, connect):
    pub = connect(broker, "ret-pub")
    assert pub.publish("ret/a", "v1", qos=1, retain=True) == 0
    first = connect(broker, "ret-sub1")
    first.subscribe("ret/#", qos=1)
    message = first.expect()
    assert (message.topic, message.payload, message.retain) == ("ret/a", b"v1", True)
    assert message.qos == 1

    assert pub.publish("ret/a", b"", qos=1, retain=True) == 0
    # The deletion itself goes to current subscribers like any publish.
    deletion = first.expect()
    assert (deletion.topic, deletion.payload, deletion.retain) == ("ret/a", b"", False)
    later = connect(broker, "ret-sub2")
    later.subscribe("ret/#")
    pub.publish("ret/marker")
    assert later.collect_until("ret/marker") == []


def test_retain_handling(broker, connect):
    pub = connect(broker, "rh-pub")
    assert pub.publish("rh/x", "v", qos=1, retain=True) == 0

    if_new = SubscribeOptions(qos=0, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB)
    sub = connect(broker, "rh-sub")
    sub.subscribe("rh/#", options=if_new)
    message = sub.expect()
    assert (message.topic, message.retain) == ("rh/x", True)
    # The same filter again is not a new subscription: nothing is sent.
    sub.subscribe("rh/#", options=if_new)
    pub.publish("rh/marker")
    assert sub.collect_until("rh/marker") == []
    # Retain Handling 0 on the same filter sends it again, so the absence
    # above was the option's doing.
    sub.subscribe("rh/#", options=SubscribeOptions(qos=0))
    message = sub.expect()
    assert (message.topic, message.retain) == ("rh/x", True)

    never = connect(broker, "rh-never")
    never.subscribe(
        "rh/#", options=SubscribeOptions(qos=0, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND)
    )
    pub.publish("rh/marker")
    assert never.collect_until("rh/marker") == []


def test_retain_as_published(broker, connect):
    rap = connect(broker, "rap-sub")
    plain = connect(broker, "plain-sub")
    pub = connect(broker, "rap-pub")
    rap.subscribe("rap/#", options=SubscribeOptions(qos=1, retainAsPublished=True))
    plain.subscribe("rap/#", options=SubscribeOptions(qos=1))
    assert pub.publish("rap/x", "live", qos=1, retain=True) == 0
    assert (rap.expect().retain, plain.expect().retain) == (True, False)
    # Retain As Published keeps the flag as it was, including unset.
    assert pub.publish("rap/y", "live", qos=1, retain=False) == 0
    assert (rap.expect().retain, plain.expect().retain) == (False, False)


# 4. QoS


def test_delivered_qos_is_min_of_published_and_granted(broker, connect):
    subs = {}
    for granted in (0, 1, 2):
        subs[granted] = connect(broker, f"qos-sub{granted}")
        assert subs[granted].subscribe("q/#", qos=granted) == [granted]
    pub = connect(broker, "qos-pub")
    for published in (0, 1, 2):
        assert pub.publish(f"q/p{published}", str(published), qos=published) == 0
    for granted, sub in subs.items():
        received = {}
        for _ in range(3):
            message = sub.expect()
            received[message.topic] = message.qos
        assert received == {f"q/p{p}": min(p, granted) for p in (0, 1, 2)}, f"granted {granted}"


def test_qos2_publish_completes_and_arrives_exactly_once(broker, connect):
    sub = connect(broker, "qos2-sub")
    pub = connect(broker, "qos2-pub")
    assert sub.subscribe("x2/#", qos=2) == [2]
    # publish() returns once paho's on_publish fired, i.e. on PUBCOMP.
    assert pub.publish("x2/once", "exactly", qos=2) == 0
    assert pub.publish("x2/marker", qos=2) == 0
    before = sub.collect_until("x2/marker")
    assert [(m.topic, m.payload, m.qos) for m in before] == [("x2/once", b"exactly", 2)]


# 5. No Local


def test_no_local(broker, connect):
    me = connect(broker, "nl-me")
    other = connect(broker, "nl-other")
    me.subscribe("nl/#", options=SubscribeOptions(qos=0, noLocal=True))
    other.subscribe("nl/#")
    me.publish("nl/mine", "from me")
    # The other subscriber got it, so routing (to me too, were it wrong) is done.
    assert other.expect().topic == "nl/mine"
    other.publish("nl/theirs", "from other")
    message = me.expect()
    assert (message.topic, message.payload) == ("nl/theirs", b"from other")


# 6-7. Sessions


def test_session_resumes_mqtt5(broker, connect):
    first = connect(broker, "sess5", clean_start=False, session_expiry=60)
    assert first.session_present is False
    assert first.subscribe("sess/#", qos=1) == [1]
    first.disconnect()

    pub = connect(broker, "sess5-pub")
    for i in range(3):
        assert pub.publish(f"sess/{i}", f"m{i}", qos=1) == 0

    resumed = connect(broker, "sess5", clean_start=False, session_expiry=60)
    assert resumed.session_present is True
    pub.publish("sess/marker", qos=1)
    before = resumed.collect_until("sess/marker")
    assert [(m.payload, m.qos) for m in before] == [(b"m0", 1), (b"m1", 1), (b"m2", 1)]
    resumed.disconnect()

    fresh = connect(broker, "sess5", clean_start=True)
    assert fresh.session_present is False


def test_session_resumes_mqtt311(broker, connect):
    v311 = {"protocol": mqtt.MQTTv311}
    first = connect(broker, "sess311", clean_start=False, **v311)
    assert first.session_present is False
    assert first.subscribe("sess/#", qos=1) == [1]
    first.disconnect()

    pub = connect(broker, "sess311-pub", **v311)
    for i in range(3):
        assert pub.publish(f"sess/{i}", f"m{i}", qos=1) == 0

    resumed = connect(broker, "sess311", clean_start=False, **v311)
    assert resumed.session_present is True
    pub.publish("sess/marker", qos=1)
    before = resumed.collect_until("sess/marker")
    assert [(m.payload, m.qos) for m in before] == [(b"m0", 1), (b"m1", 1), (b"m2", 1)]
    resumed.disconnect()

    fresh = connect(broker, "sess311", clean_start=True, **v311)
    assert fresh.session_present is False


def test_session_expiry_is_capped(start_broker, connect):
    broker = start_broker("limits:\n  max_session_expiry: 1h")
    client = connect(broker, "capped", session_expiry=100000)
    assert prop(client.connack_properties, "SessionExpiryInterval") == 3600


# 8. Takeover


def test_takeover_disconnects_first_client_with_0x8e(broker, connect):
    first = connect(broker, "twin")
    second = connect(broker, "twin")
    reason, _ = first.disconnects.get(timeout=WAIT)
    assert reason.value == 0x8E, reason
    assert second.paho.is_connected()
    # The new connection owns the client id and works.
    assert second.subscribe("twin/#") == [0]


# 9. Wills

WILL = {"topic": "status/dev", "payload": "offline", "qos": 1}


def test_will_published_when_connection_drops(broker, connect):
    watcher = connect(broker, "will-watcher")
    watcher.subscribe("status/#", qos=1)
    device = connect(broker, "will-dev", will=WILL)
    device.drop()
    message = watcher.expect()
    assert (message.topic, message.payload, message.qos) == ("status/dev", b"offline", 1)


def test_no_will_after_clean_disconnect(broker, connect):
    watcher = connect(broker, "will-watcher")
    watcher.subscribe("status/#", qos=1)
    device = connect(broker, "will-clean", will=WILL)
    device.disconnect()
    # The broker logs the disconnect after acting on it (Will included), so
    # the marker below is routed after any Will would have been.
    broker.wait_for_log("client will-clean disconnected")
    marker = connect(broker, "will-marker")
    marker.publish("status/marker", qos=1)
    assert watcher.collect_until("status/marker") == []


def test_will_delay_interval(broker, connect):
    watcher = connect(broker, "will-watcher")
    watcher.subscribe("status/#", qos=1)
    delayed = dict(WILL, properties=properties(PacketTypes.WILLMESSAGE, WillDelayInterval=1))
    # A session ending with its connection would publish the Will at once.
    device = connect(broker, "will-delay", session_expiry=60, will=delayed)
    dropped_at = time.monotonic()
    device.drop()
    message = watcher.expect()
    elapsed = time.monotonic() - dropped_at
    assert (message.topic, message.payload) == ("status/dev", b"offline")
    assert elapsed >= 0.95, f"Will arrived after {elapsed:.3f} s, before its 1 s delay"
    assert prop(message, "WillDelayInterval") is None


def test_disconnect_with_will_message_publishes_will(broker, connect):
    watcher = connect(broker, "will-watcher")
    watcher.subscribe("status/#", qos=1)
    device = connect(broker, "will-rc4", will=WILL)
    device.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=0x04))
    message = watcher.expect()
    assert (message.topic, message.payload) == ("status/dev", b"offline")


# 10. Shared subscriptions


def test_shared_subscription_round_robin(broker, connect):
    workers = [connect(broker, f"worker{i}") for i in range(2)]
    for worker in workers:
        assert worker.subscribe("$share/workers/jobs/#", qos=1) == [1]
        # A plain subscription for the marker, which every worker must see.
        assert worker.subscribe("done", qos=1) == [1]
    pub = connect(broker, "jobs-pub")
    for i in range(10):
        assert pub.publish(f"jobs/{i}", f"job{i}", qos=1) == 0
    assert pub.publish("done", qos=1) == 0

    got = [[m.payload for m in w.collect_until("done")] for w in workers]
    assert sorted(got[0] + got[1]) == sorted(f"job{i}".encode() for i in range(10))
    assert [len(g) for g in got] == [5, 5], got


# 11. Refusals


def test_subscribe_refusals(broker, connect):
    client = connect(broker, "refuse-sub")
    assert client.subscribe("$SYS/#") == [0x87]
    # Well formed but not accepted: "$share" is written in lower case.
    assert client.subscribe("$SHARE/g/t") == [0x8F]
    # A refusal leaves the connection usable.
    assert client.subscribe("fine/#") == [0]
    # A filter that is no topic filter is a protocol error: DISCONNECT 0x82.
    client.paho._filter_wildcard_len_check = lambda _filter: mqtt.MQTT_ERR_SUCCESS
    result, _ = client.paho.subscribe("a/b#", options=mqtt.SubscribeOptions(qos=0))
    assert result == mqtt.MQTT_ERR_SUCCESS, result
    reason, _ = client.disconnects.get(timeout=WAIT)
    assert reason.value == 0x82, reason


def test_publish_refusals(broker, connect):
    watcher = connect(broker, "refuse-watch")
    watcher.subscribe("#")
    client = connect(broker, "refuse-pub")
    assert client.publish("$SYS/x", "no", qos=1) == 0x87
    utf8 = publish_properties(PayloadFormatIndicator=1)
    assert client.publish("bad/utf8", b"\xff\xfe\xfd", qos=1, properties=utf8) == 0x99
    assert client.publish("$share/x", "no", qos=1) == 0x90
    assert client.publish("ok", "yes", qos=1) == 0
    # Of all of the above only the accepted publish was routed.
    assert [m.topic for m in watcher.collect_until("ok")] == []


# 12-13. Topic alias and CONNACK


def test_topic_alias_resolved_for_subscriber(broker, connect):
    sub = connect(broker, "alias-sub")
    pub = connect(broker, "alias-pub")
    assert prop(pub.connack_properties, "TopicAliasMaximum") == 16
    sub.subscribe("alias/#")
    pub.publish("alias/topic", "first", properties=publish_properties(TopicAlias=1))
    pub.publish("", "second", properties=publish_properties(TopicAlias=1))
    for payload in (b"first", b"second"):
        message = sub.expect()
        assert (message.topic, message.payload) == ("alias/topic", payload)
        assert prop(message, "TopicAlias") is None


def test_connack_properties(start_broker, connect):
    broker = start_broker("limits:\n  max_message_size: 64KiB\n  max_keepalive: 5s")
    client = connect(broker, "", keepalive=60)
    props = client.connack_properties
    assert prop(props, "TopicAliasMaximum") == 16
    assert prop(props, "MaximumPacketSize") == 65536
    assert prop(props, "ServerKeepAlive") == 5
    assigned = prop(props, "AssignedClientIdentifier")
    assert isinstance(assigned, str) and assigned != ""


# 14. MQTT 3.1.1 alongside MQTT 5


def test_mqtt311_and_mqtt5_clients_exchange_all_qos(broker, connect):
    sub5 = connect(broker, "mix-sub5")
    sub311 = connect(broker, "mix-sub311", protocol=mqtt.MQTTv311)
    assert sub5.subscribe("from311/#", qos=2) == [2]
    assert sub311.subscribe("from5/#", qos=2) == [2]
    pub311 = connect(broker, "mix-pub311", protocol=mqtt.MQTTv311)
    pub5 = connect(broker, "mix-pub5")
    # The 3.1.1 subscriber must get the message without MQTT 5 properties.
    user = publish_properties(UserProperty=[("k", "v")])
    for qos in (0, 1, 2):
        assert pub311.publish(f"from311/q{qos}", f"a{qos}", qos=qos) == 0
        assert pub5.publish(f"from5/q{qos}", f"b{qos}", qos=qos, properties=user) == 0

    for sub, prefix, letter in ((sub5, "from311", "a"), (sub311, "from5", "b")):
        received = {}
        for _ in range(3):
            message = sub.expect()
            received[message.topic] = (message.payload, message.qos)
        assert received == {f"{prefix}/q{q}": (f"{letter}{q}".encode(), q) for q in (0, 1, 2)}
