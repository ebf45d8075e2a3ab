"""Client quotas: set, described and removed with `kafka-configs --entity-type users|clients|ips` (Kafka's
ConfigCommand, through AlterClientQuotas and DescribeClientQuotas) and the admin protocol, with Kafka's checks and
errors; enforced as Kafka enforces them.

One broker for the module (fjord, or Kafka with E2E_BROKER=kafka); each test uses its own users and client ids.
"""

import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path
from typing import List, Tuple

import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

from harness import Broker, free_port, kafka_tool, make_broker, read_properties, wait_for, write_properties

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35


# 127.0.0.2 may hold 3 connections at once; every other address (the tests' clients, the broker's own links) many.
LIMITED_ADDRESS, LIMITED_COUNT = "127.0.0.2", 3
# A second listener that takes 2 connections at once.
LISTENER_MAX = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Broker:
    b = make_broker(Path(tmp_path_factory.mktemp("quotas")) / "broker")
    props = read_properties(b.config)
    b.limited_port = free_port()
    added = f"LIMITED://127.0.0.1:{b.limited_port}"
    props["listeners"] += "," + added
    props["advertised.listeners"] += "," + added
    props["listener.security.protocol.map"] = (props.get("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")
                                               + ",LIMITED:PLAINTEXT")
    props["inter.broker.listener.name"] = "PLAINTEXT"
    props["listener.name.limited.max.connections"] = str(LISTENER_MAX)
    props["max.connections.per.ip"] = "1000"
    props["max.connections.per.ip.overrides"] = f"{LIMITED_ADDRESS}:{LIMITED_COUNT}"
    write_properties(b.config, props)
    b.start()
    yield b
    if b.running():
        b.stop()


def configs(b: Broker, *args: str) -> str:
    return kafka_tool(CONFIG_COMMAND, "--bootstrap-server", b.bootstrap, *args)


def configs_failing(b: Broker, *args: str) -> str:
    """kafka-configs' output for a change the broker refuses (the tool reports it and exits non-zero)."""
    try:
        configs(b, *args)
    except Exception as e:  # kafka_tool raises with the tool's output
        return str(e)
    raise AssertionError(f"kafka-configs {' '.join(args)} succeeded")


def describe(b: Broker, components, strict=False):
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        request = DescribeClientQuotasRequest(components=[
            DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components],
            strict=strict)
        response = admin._manager.run(admin._manager.send, request)
        entries = None
        if response.entries is not None:
            entries = sorted((tuple(sorted((e.entity_type, e.entity_name or "<default>") for e in entry.entity)),
                              tuple(sorted((v.key, v.value) for v in entry.values))) for entry in response.entries)
        return response.error_code, entries
    finally:
        admin.close()


def alter(b: Broker, entries, validate_only=False):
    """AlterClientQuotas with `entries` of (entity [(type, name)], ops [(key, value or None)]): each entry's result."""
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        E = AlterClientQuotasRequest.EntryData
        request = AlterClientQuotasRequest(entries=[E(
            entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[E.OpData(key=k, value=v if v is not None else 0.0, remove=v is None) for k, v in ops])
            for entity, ops in entries], validate_only=validate_only)
        response = admin._manager.run(admin._manager.send, request)
        return [(e.error_code, e.error_message) for e in response.entries]
    finally:
        admin.close()


def test_kafka_configs_sets_describes_and_removes_quotas_of_users_clients_and_ips(broker: Broker):
    configs(broker, "--entity-type", "users", "--entity-name", "q-alice", "--alter",
            "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    configs(broker, "--entity-type", "users", "--entity-name", "q-alice", "--entity-type", "clients",
            "--entity-name", "q-app", "--alter", "--add-config", "request_percentage=12.5")
    configs(broker, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
            "producer_byte_rate=4096")
    configs(broker, "--entity-type", "ips", "--entity-name", "127.0.0.9", "--alter", "--add-config",
            "connection_creation_rate=5")

    out = configs(broker, "--entity-type", "users", "--entity-name", "q-alice", "--describe")
    assert "Quota configs for user-principal 'q-alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0" \
        in out, out
    out = configs(broker, "--entity-type", "users", "--entity-name", "q-alice", "--entity-type", "clients",
                  "--entity-name", "q-app", "--describe")
    assert "Quota configs for user-principal 'q-alice', client-id 'q-app' are request_percentage=12.5" in out, out
    out = configs(broker, "--entity-type", "clients", "--entity-default", "--describe")
    assert "Quota configs for the default client-id are producer_byte_rate=4096.0" in out, out
    out = configs(broker, "--entity-type", "ips", "--entity-name", "127.0.0.9", "--describe")
    assert "Quota configs for ip '127.0.0.9' are connection_creation_rate=5.0" in out, out

    # The protocol's view: a user filter matches the user's entities; strict only the user alone.
    code, entries = describe(broker, [("user", 0, "q-alice")])
    assert code == 0 and entries == [
        ((("client-id", "q-app"), ("user", "q-alice")), (("request_percentage", 12.5),)),
        ((("user", "q-alice"),), (("consumer_byte_rate", 2048.0), ("producer_byte_rate", 1024.0))),
    ], entries
    code, entries = describe(broker, [("user", 0, "q-alice")], strict=True)
    assert [e[0] for e in entries] == [(("user", "q-alice"),)], entries
    code, entries = describe(broker, [("client-id", 1, None)], strict=True)
    assert entries == [((("client-id", "<default>"),), (("producer_byte_rate", 4096.0),))], entries

    configs(broker, "--entity-type", "users", "--entity-name", "q-alice", "--alter", "--delete-config",
            "producer_byte_rate")
    out = configs(broker, "--entity-type", "users", "--entity-name", "q-alice", "--describe")
    assert "are consumer_byte_rate=2048.0" in out and "producer_byte_rate" not in out, out
    # The rest removed in one request; an entity left without keys is gone.
    assert alter(broker, [([("user", "q-alice")], [("consumer_byte_rate", None)]),
                          ([("user", "q-alice"), ("client-id", "q-app")], [("request_percentage", None)]),
                          ([("client-id", None)], [("producer_byte_rate", None)]),
                          ([("ip", "127.0.0.9")], [("connection_creation_rate", None)])]) == [(0, None)] * 4
    assert describe(broker, [("user", 0, "q-alice")]) == (0, [])
    assert describe(broker, [("client-id", 1, None)]) == (0, [])


def test_bad_quotas_are_refused_with_kafkas_messages(broker: Broker):
    alice = [("user", "q-bad")]
    refused = alter(broker, [
        (alice, [("producer_byte_rate", 1.5)]),
    ])
    assert refused == [(INVALID_REQUEST, "producer_byte_rate cannot be a fractional value.")], refused
    cases = [
        ([("user", "q-bad")], [("no_such_quota", 1.0)], "Invalid configuration key no_such_quota"),
        ([("user", "q-bad")], [("consumer_byte_rate", 0.0)], "Quota consumer_byte_rate must be greater than 0"),
        ([("ip", None)], [("producer_byte_rate", 10.0)], "Invalid configuration key producer_byte_rate"),
        ([("ip", "1.2.3.4"), ("user", "q-bad")], [("producer_byte_rate", 10.0)], None),
        ([("user", "")], [("producer_byte_rate", 10.0)], "Empty user not supported"),
        ([("group", "g")], [("producer_byte_rate", 10.0)], "Unhandled client quota entity type: group"),
    ]
    for entity, ops, message in cases:
        [(code, got)] = alter(broker, [(entity, ops)])
        assert code == INVALID_REQUEST, (entity, ops, code, got)
        if message is not None:
            assert got == message, (entity, ops, got)
    # One refused entity leaves the others of the request applied; validate-only applies nothing.
    results = alter(broker, [([("user", "q-bad")], [("bogus", 1.0)]), ([("user", "q-good")], [
        ("producer_byte_rate", 10.0)])])
    assert [c for c, _ in results] == [INVALID_REQUEST, 0], results
    assert alter(broker, [([("user", "q-check")], [("producer_byte_rate", 10.0)])], validate_only=True) == [(0, None)]
    assert describe(broker, [("user", 0, "q-check")]) == (0, [])
    assert describe(broker, [("user", 0, "q-good")])[1] == [
        ((("user", "q-good"),), (("producer_byte_rate", 10.0),))]
    alter(broker, [([("user", "q-good")], [("producer_byte_rate", None)])])
    # Bad filters: Kafka's codes.
    assert describe(broker, [("group", 2, None)])[0] == UNSUPPORTED_VERSION
    assert describe(broker, [("user", 0, None)])[0] == INVALID_REQUEST
    assert describe(broker, [("ip", 2, None), ("user", 1, None)])[0] == INVALID_REQUEST
    out = configs_failing(broker, "--entity-type", "users", "--entity-name", "q-bad", "--alter", "--add-config",
                          "producer_byte_rate=1.5")
    assert "producer_byte_rate cannot be a fractional value" in out, out


# Kafka measures a quota over 11 samples of 1 s, and a client starting out over 10 s at least. A client that sends all
# it may sends about a window's worth (10 s of quota) at once, then little until that sample expires 11 s later, then
# the next window's worth: its rate is a sawtooth of period 11 s. Measured over a fixed time it is off by up to a
# burst, by where the last one falls (a third over 33 s, seen once); measured over whole periods (held_rate), it is
# the rate the client is held to. MEASURE_S leaves room for three periods.
MEASURE_S = 33
QUOTA = 256 * 1024

# (seconds since the start, bytes) of each record acknowledged or received.
Flow = List[Tuple[float, int]]


def rate(flow: Flow, seconds: float) -> float:
    return sum(n for _, n in flow) / seconds


def held_rate(flow: Flow, seconds: float) -> float:
    """Bytes per second over the whole periods of a throttled flow: from the start to the last burst's start (a burst
    begins after a second or more without a record); over `seconds` if the flow never paused."""
    bursts = [t for (before, _), (t, _) in zip(flow, flow[1:]) if t - before >= 1.0]
    if not bursts:
        return rate(flow, seconds)
    end = bursts[-1]
    return sum(n for t, n in flow if t < end) / end


def throttles_counted(b: Broker):
    """fjord's `/metrics` count of the throttles each quota asked for (Kafka reports them through JMX): responses
    throttled and seconds, by quota key."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://{b.http}/metrics", timeout=10) as response:
        families = text_string_to_metric_families(response.read().decode())
    samples = {(s.name, s.labels.get("quota")): s.value for f in families for s in f.samples}
    return {key: (samples[("fjord_quota_throttled_responses_total", key)],
                  samples[("fjord_quota_throttle_time_seconds_total", key)])
            for key in ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")}


def quota(b: Broker, entity, key: str, value):
    assert alter(b, [(entity, [(key, value)])]) == [(0, None)]


def produce_for(b: Broker, client_id: str, topic: str, seconds: float) -> Flow:
    """Produces as fast as the broker lets `client_id` for `seconds`; when each record was acknowledged."""
    from confluent_kafka import Producer
    flow: Flow = []
    start = time.monotonic()

    def delivered(err, msg):
        if err is None:
            flow.append((time.monotonic() - start, len(msg.value())))

    # Requests of 64 KiB at most, so that one request is a small part of a second's quota.
    producer = Producer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                         "batch.size": 65536, "queue.buffering.max.kbytes": 1024})
    value = b"q" * 4096
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    counted = [e for e in flow if e[0] < seconds]
    producer.purge()
    producer.flush(10)
    return counted


def consume_for(b: Broker, client_id: str, topic: str, seconds: float) -> Flow:
    """Consumes `topic` from the start as `client_id` for `seconds`; when each record came."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "group.id": client_id,
                         "enable.auto.commit": False, "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                         "max.partition.fetch.bytes": 65536})
    consumer.assign([TopicPartition(topic, 0, 0)])
    flow: Flow = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for m in consumer.consume(100, timeout=0.2):
            if m.error() is None:
                flow.append((time.monotonic() - start, len(m.value())))
    consumer.close()
    return flow


def create_topic(b: Broker, topic: str):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def fill(b: Broker, topic: str, size: int):
    from confluent_kafka import Producer
    create_topic(b, topic)
    # Batches of 16 KiB: a fetch answers whole batches, so they set how finely a consumer's quota can be held.
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "client.id": "q-filler",
                         "batch.size": 16384})
    value = b"f" * 4096
    for _ in range(size // len(value)):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def test_producers_and_consumers_are_held_to_their_byte_rate_quotas(broker: Broker):
    """A producer and a consumer, each over its quota, side by side: each held within 10 % of its quota."""
    fill(broker, "q-consumed", 2 * QUOTA * MEASURE_S)
    create_topic(broker, "q-produced")
    quota(broker, [("client-id", "q-producer")], "producer_byte_rate", QUOTA)
    quota(broker, [("client-id", "q-consumer")], "consumer_byte_rate", QUOTA)
    flows = {}
    threads = [threading.Thread(target=lambda: flows.update(p=produce_for(broker, "q-producer", "q-produced",
                                                                            MEASURE_S))),
               threading.Thread(target=lambda: flows.update(c=consume_for(broker, "q-consumer", "q-consumed",
                                                                            MEASURE_S)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rates = {k: held_rate(flow, MEASURE_S) for k, flow in flows.items()}
    print(f"quota {QUOTA} B/s: produced {rates['p']:.0f} B/s, consumed {rates['c']:.0f} B/s over whole periods; "
          f"over {MEASURE_S} s {rate(flows['p'], MEASURE_S):.0f} and {rate(flows['c'], MEASURE_S):.0f} B/s")
    assert 0.9 * QUOTA <= rates["p"] <= 1.1 * QUOTA, rates
    assert 0.9 * QUOTA <= rates["c"] <= 1.1 * QUOTA, rates
    if broker.http:
        throttled = throttles_counted(broker)
        for key in ("producer_byte_rate", "consumer_byte_rate"):
            assert throttled[key][0] > 0 and throttled[key][1] > 0, (key, throttled)


def test_a_quota_changed_on_a_running_broker_is_followed(broker: Broker):
    create_topic(broker, "q-changed")
    free = rate(produce_for(broker, "q-changing", "q-changed", 2), 2)
    small = 64 * 1024
    quota(broker, [("client-id", "q-changing")], "producer_byte_rate", small)
    held = rate(produce_for(broker, "q-changing", "q-changed", 12), 12)
    quota(broker, [("client-id", "q-changing")], "producer_byte_rate", None)
    freed = rate(produce_for(broker, "q-changing", "q-changed", 2), 2)
    print(f"without a quota {free:.0f} B/s; quota {small} B/s: {held:.0f} B/s; removed: {freed:.0f} B/s")
    # Over 12 s from the change, the first burst (10 s of quota) included.
    assert held <= 2.0 * small, held
    assert free >= 8 * small and freed >= 8 * small, (free, freed)


def api_versions_frame(correlation_id: int) -> bytes:
    client_id = b"q-raw"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def connect(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(api_versions_frame(7))
    return s


def answered(s: socket.socket, timeout: float) -> bool:
    """Whether an ApiVersions answer comes back on `s` within `timeout` (False if it is closed or stays silent)."""
    s.settimeout(timeout)
    try:
        return len(s.recv(8)) >= 8
    except (socket.timeout, ConnectionError):
        return False


def test_an_address_at_max_connections_per_ip_has_its_next_connections_closed(broker: Broker):
    port = broker.port
    held = [connect(port, LIMITED_ADDRESS) for _ in range(LIMITED_COUNT + 2)]
    served = [answered(s, 5) for s in held]
    assert served == [True] * LIMITED_COUNT + [False] * 2, served
    for s in held:
        s.close()
    # Once closed, its connections count no more; another address was never limited.
    deadline = time.monotonic() + 10
    while True:
        again = [connect(port, LIMITED_ADDRESS) for _ in range(LIMITED_COUNT)]
        ok = all(answered(s, 5) for s in again)
        for s in again:
            s.close()
        if ok or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ok
    others = [connect(port, "127.0.0.5") for _ in range(LIMITED_COUNT + 2)]
    assert all(answered(s, 5) for s in others)
    for s in others:
        s.close()


def test_connection_limits_changed_on_a_running_broker_are_followed(broker: Broker):
    """`kafka-configs --entity-type brokers --entity-default` gives an address an override of 1
    (max.connections.per.ip.overrides, replacing the static value): its second connection is closed; the dynamic
    value deleted, the static one is back and the address is not limited."""
    source, static = "127.0.0.7", f"{LIMITED_ADDRESS}:{LIMITED_COUNT}"
    dynamic = ["--entity-type", "brokers", "--entity-default", "--alter"]

    def second_served() -> bool:
        first, second = connect(broker.port, source), connect(broker.port, source)
        try:
            return answered(first, 5) and answered(second, 2)
        finally:
            first.close()
            second.close()

    configs(broker, *dynamic, "--add-config", f"max.connections.per.ip.overrides=[{static},{source}:1]")
    try:
        wait_for(lambda: not second_served(), "the dynamic override was not followed", 30)
    finally:
        configs(broker, *dynamic, "--delete-config", "max.connections.per.ip.overrides")
    wait_for(second_served, "the static overrides did not come back", 30)


def test_a_listener_at_max_connections_takes_the_next_one_when_one_closes(broker: Broker):
    held = [connect(broker.limited_port, "127.0.0.6") for _ in range(LISTENER_MAX)]
    assert all(answered(s, 5) for s in held)
    waiting = connect(broker.limited_port, "127.0.0.6")
    assert not answered(waiting, 1.5), "a connection over the listener's max.connections was served"
    held[0].close()
    assert answered(waiting, 10)
    for s in held[1:] + [waiting]:
        s.close()


def test_an_address_over_its_connection_creation_rate_is_throttled(broker: Broker):
    """connection_creation_rate=2 for one address: a burst of 40 connections gets one window's worth (10 s at 2 a
    second) served; the others are held unserved and closed."""
    source = "127.0.0.3"
    quota(broker, [("ip", source)], "connection_creation_rate", 2)
    try:
        burst = [connect(broker.port, source) for _ in range(40)]
        served = sum(answered(s, 3) for s in burst)
        for s in burst:
            s.close()
        print(f"connection_creation_rate=2: {served} of 40 served")
        assert 18 <= served <= 22, served
    finally:
        quota(broker, [("ip", source)], "connection_creation_rate", None)


def test_topic_mutations_over_controller_mutation_rate_are_refused_or_throttled(broker: Broker):
    """controller_mutation_rate=2 partitions a second: the bucket holds 22 (11 samples of 1 s). A topic of 30
    partitions takes it below zero; from CreateTopics v6 the topics met below zero are refused
    THROTTLING_QUOTA_EXCEEDED with the time until it is back at zero, older versions are served and throttled."""
    from kafka.protocol.admin.topics import CreateTopicsRequest, DeleteTopicsRequest
    quota(broker, [("client-id", "q-mutator")], "controller_mutation_rate", 2)

    def send(request):
        # A client of its own each time: a client keeps away from a broker that throttled it, and the broker mutes
        # the connection, while the quota is the client id's.
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="q-mutator")
        try:
            return admin._manager.run(admin._manager.send, request)
        finally:
            admin.close()

    def create(version, *topics):
        T = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest[version](topics=[T(name=n, num_partitions=p, replication_factor=1, assignments=[],
                                                         configs=[]) for n, p in topics], timeout_ms=30000,
                                               validate_only=False)
        response = send(request)
        return {t.name: t.error_code for t in response.topics}, response.throttle_time_ms

    try:
        codes, throttle = create(7, ("q-mut-a", 30), ("q-mut-b", 1), ("q-mut-c", 1))
        assert codes == {"q-mut-a": 0, "q-mut-b": 89, "q-mut-c": 89}, codes
        # 8 below zero at 2 a second: 4 s.
        assert 3000 <= throttle <= 4100, throttle
        codes, throttle = create(5, ("q-mut-d", 2))
        assert codes == {"q-mut-d": 0} and throttle > 0, (codes, throttle)
        if broker.http:
            # The two throttled answers, 4 s and more between them.
            counted = throttles_counted(broker)["controller_mutation_rate"]
            assert counted[0] >= 2 and counted[1] >= 4, counted
        response = send(DeleteTopicsRequest[6](topics=[DeleteTopicsRequest.DeleteTopicState(name="q-mut-a",
                                                                                             topic_id=None)],
                                               timeout_ms=30000))
        assert [r.error_code for r in response.responses] == [89], response
        # Once the bucket is back at zero, a topic passes again.
        time.sleep(throttle / 1000 + 1.5)
        codes, _ = create(7, ("q-mut-b", 1))
        assert codes == {"q-mut-b": 0}, codes
    finally:
        quota(broker, [("client-id", "q-mutator")], "controller_mutation_rate", None)


def requests_answered(b: Broker, client_id: str, seconds: float) -> Tuple[int, List[int]]:
    """Metadata requests answered on one connection, one after another, within `seconds`, and the
    `throttle_time_ms` of each answer."""
    name = client_id.encode()
    s = socket.create_connection(("127.0.0.1", b.port))
    s.settimeout(seconds + 5)
    answered_count, correlation, throttles = 0, 0, []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            correlation += 1
            # Metadata v3, every topic (a null array); its answer starts with throttle_time_ms.
            body = struct.pack(">hhih", 3, 3, correlation, len(name)) + name + struct.pack(">i", -1)
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            answer = recv_exactly(s, size)
            throttles.append(struct.unpack(">i", answer[4:8])[0])
            answered_count += 1
    finally:
        s.close()
    return answered_count, throttles


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_a_client_over_its_request_percentage_is_held_back(broker: Broker):
    """request_percentage=0.0001 (a millionth of a second of request handling a second): once its first requests
    have used that up, each next one waits out a throttle (at most a second), which its answers carry in
    throttle_time_ms, where a client without the quota is answered as fast as it asks, unthrottled."""
    quota(broker, [("client-id", "q-busy")], "request_percentage", 0.0001)
    try:
        free, unthrottled = requests_answered(broker, "q-idle", 3)
        held, throttles = requests_answered(broker, "q-busy", 3)
        print(f"request_percentage=0.0001: {held} Metadata requests answered in 3 s (throttles {throttles});"
              f" without: {free}")
        assert held <= 10 and free >= 10 * held, (held, free)
        assert set(unthrottled) == {0}, unthrottled
        # The first answer may come before the quota is found used up.
        assert len(throttles) >= 2 and all(0 < t <= 1000 for t in throttles[1:]), throttles
        if broker.http:
            assert throttles_counted(broker)["request_percentage"][0] >= len(throttles) - 1
    finally:
        quota(broker, [("client-id", "q-busy")], "request_percentage", None)
