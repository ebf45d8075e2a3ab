"""Clusters with real clients — three combined broker + controller nodes, and three controllers with three brokers:
every client sees every broker, partitions spread over them, a consumer group spans them, and the cluster survives
kill -9 of its active controller. Runs against fjord, or Apache Kafka with E2E_BROKER=kafka (same KRaft
properties).

Topics here have replication factor 1 (ISR replication is a later step): a dead node's partitions are unavailable
until it returns, and come back with it.
"""

import re
import shutil
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import CLIENTS, Cluster, kafka_tool, metadata_quorum_status, round_trip, run_tool, wait_for


@pytest.fixture(scope="module", params=["combined", "split"])
def cluster(request, tmp_path_factory):
    brokers = 0 if request.param == "combined" else 3
    # Snapshots every 2 KiB of metadata, and a log purged up to its snapshot past 2 KiB, so that a wiped voter
    # has to be sent a snapshot; metadata in its own dir, so that wiping it leaves the partitions alone.
    c = Cluster(tmp_path_factory.mktemp(request.param), controllers=3, brokers=brokers, metadata_dirs=True,
                extra={"metadata.log.max.record.bytes.between.snapshots": "2048",
                       "metadata.max.retention.bytes": "2048"})
    c.mode = request.param
    c.start()
    yield c
    c.kill9()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, name: str, partitions: int) -> None:
    a = admin(bootstrap)  # kept alive until the futures complete
    for _, f in a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).items():
        f.result(30)


def leaders(bootstrap: str, topic: str, deadline_s: float = 30) -> dict:
    """Partition → leader once every partition has one."""
    end = time.monotonic() + deadline_s
    while True:
        md = admin(bootstrap).list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return {p.id: p.leader for p in t.partitions.values()}
        assert time.monotonic() < end, f"{topic} has no leaders: {t}"
        time.sleep(0.2)


def controller_id(bootstrap: str, deadline_s: float = 60) -> int:
    """The active controller (the metadata quorum's leader), as kafka-metadata-quorum reports it. (Metadata and
    DescribeCluster name any live broker as the controller, as KRaft brokers answer clients.)"""
    end = time.monotonic() + deadline_s
    while True:
        try:
            leader = int(metadata_quorum_status(bootstrap)["LeaderId"])
            if leader >= 0:
                return leader
        except (RuntimeError, KeyError, ValueError):
            pass
        assert time.monotonic() < end, "no active controller"
        time.sleep(0.5)


def produce(bootstrap: str, topic: str, partitions: int, count: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    errors = []
    for i in range(count):
        p.produce(topic, key=f"{tag}-{i}", value=f"{tag}-{i}", partition=i % partitions,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(90) == 0
    assert errors == []


def consume_all(bootstrap: str, topic: str, group: str, expected: int) -> dict:
    """Partition → values, read by one group member from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: dict = {}
    n = 0
    end = time.monotonic() + 90
    while n < expected and time.monotonic() < end:
        m = c.poll(1)
        if m is None or m.error():
            continue
        got.setdefault(m.partition(), []).append((m.offset(), m.value().decode()))
        n += 1
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in got], timeout=30)
    c.close()
    assert n == expected, f"read {n} of {expected}"
    for tp in committed:
        assert tp.offset == len(got[tp.partition]), tp
    return got


def test_every_node_sees_the_cluster_and_partitions_spread(cluster):
    broker_ids = sorted(b.node_id for b in cluster.brokers)
    for node in cluster.brokers:
        md = admin(node.bootstrap).list_topics(timeout=10)
        assert sorted(b.id for b in md.brokers.values()) == broker_ids
        assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", n.port) for n in cluster.brokers}
        assert md.controller_id in broker_ids, "clients are told a live broker"
    status = metadata_quorum_status(cluster.brokers[0].bootstrap)
    assert int(status["LeaderId"]) in (1, 2, 3)
    assert [v for v in ("1", "2", "3") if f'"id": {v}' in status["CurrentVoters"]] == ["1", "2", "3"]
    # Created through one broker, answered by another.
    first, second, third = cluster.brokers
    create(second.bootstrap, "spread", 6)
    assert sorted(set(leaders(third.bootstrap, "spread").values())) == broker_ids
    produce(first.bootstrap, "spread", 6, 600, "a")
    got = consume_all(third.bootstrap, "spread", "spread-group", 600)
    for partition, records in got.items():
        assert [o for o, _ in records] == list(range(len(records))), "offsets in order, no gaps"
        assert [int(v.split("-")[1]) % 6 for _, v in records] == [partition] * len(records)


def test_active_controller_killed_a_new_one_takes_over_and_the_old_rejoins(cluster):
    old = controller_id(cluster.bootstrap)
    victim = cluster.node(old)
    victim.kill9()
    survivors = ",".join(n.bootstrap for n in cluster.brokers if n.node_id != old)
    new = controller_id(survivors)
    assert new != old
    # Metadata changes go on: created through a surviving broker.
    create(survivors, "after-failover", 2)
    assert leaders(survivors, "after-failover")
    # Back with its data dir and id, it rejoins (and, a broker too, leads its partitions again).
    victim.start(timeout_s=120)
    if victim.is_broker:
        assert old in set(leaders(cluster.bootstrap, "spread").values())
    produce(cluster.bootstrap, "spread", 6, 60, "b")
    status = metadata_quorum_status(cluster.bootstrap)
    assert int(status["LeaderId"]) in (1, 2, 3)


def test_without_a_quorum_data_flows_and_metadata_changes_fail_retriably(cluster):
    """Two of the three voters down: the brokers that are left keep serving the partitions they lead; a metadata
    change fails with a retriable timeout instead of hanging; with the voters back, changes work again."""
    from confluent_kafka import KafkaError

    voters = [n for n in cluster.nodes if "controller" in n.roles]
    down = voters[:2]
    for node in down:
        node.kill9()
    alive = [b for b in cluster.brokers if b.running()]
    bootstrap = ",".join(b.bootstrap for b in alive)
    led = {p: l for p, l in leaders(bootstrap, "spread").items() if l in {b.node_id for b in alive}}
    assert led, "some partition is led by a live broker"
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000})
    errors = []
    for i in range(60):
        p.produce("spread", value=b"q", partition=list(led)[i % len(led)],
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(60) == 0 and errors == []

    a = admin(bootstrap)
    started = time.monotonic()
    (future,) = a.create_topics([NewTopic("no-quorum", num_partitions=1, replication_factor=1)],
                                request_timeout=15).values()
    with pytest.raises(Exception) as refused:
        future.result(90)
    error = refused.value.args[0]
    assert error.code() in (KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.NOT_CONTROLLER), error
    assert error.retriable() or error.code() == KafkaError._TIMED_OUT, error
    assert time.monotonic() - started < 90

    for node in down:
        node.start(timeout_s=120)
    create(cluster.bootstrap, "quorum-back", 1)
    assert leaders(cluster.bootstrap, "quorum-back")


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_produces_and_consumes_across_the_brokers(cluster, tmp_path, client):
    """Java kafka-clients, franz-go, librdkafka and kafka-python against the cluster: partitions led by every broker,
    each acknowledged record read back exactly once, in order. The whole matrix runs on the combined cluster; the
    split one, whose brokers answer the same code, runs librdkafka only (the test command's time budget)."""
    if cluster.mode == "split" and client != "confluent":
        pytest.skip("client matrix: combined cluster only")
    partitions = 6
    topic = f"clients-{client}"
    run_tool(client, "create-topic", bootstrap=cluster.bootstrap, topic=topic, partitions=partitions)
    assert sorted(set(leaders(cluster.bootstrap, topic).values())) == sorted(b.node_id for b in cluster.brokers)
    round_trip(client, cluster.bootstrap, topic, partitions, 3000, "lz4", tmp_path)


def test_kafka_tools_see_the_cluster(cluster):
    """kafka-topics --describe, kafka-broker-api-versions on every broker, kafka-consumer-groups and kafka-features
    describe, from Kafka's own jars, against the cluster."""
    broker_ids = sorted(b.node_id for b in cluster.brokers)
    create(cluster.bootstrap, "tools", 6)
    produce(cluster.bootstrap, "tools", 6, 60, "t")
    consume_all(cluster.bootstrap, "tools", "tools-group", 60)

    described = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap,
                           "--describe", "--topic", "tools")
    rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: (\d+)\s+Isr: (\d+)", described)
    assert len(rows) == 6, described
    assert all(leader == replicas == isr for _, leader, replicas, isr in rows), described
    assert sorted({int(leader) for _, leader, _, _ in rows}) == broker_ids, described

    for node in cluster.brokers:
        versions = kafka_tool("org.apache.kafka.tools.BrokerApiVersionsCommand", "--bootstrap-server", node.bootstrap)
        listed = sorted(int(i) for i in re.findall(r"\(id: (\d+) rack: [^)]*\) -> \(", versions))
        assert listed == broker_ids, versions
        assert "Produce(0):" in versions and "Fetch(1):" in versions, versions

    groups = kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                        cluster.bootstrap, "--describe", "--group", "tools-group")
    offsets = {}
    for line in groups.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "tools-group" and f[1] == "tools":
            offsets[int(f[2])] = (f[3], f[4])
    assert sorted(offsets) == list(range(6)), groups
    assert all(current == end == "10" for current, end in offsets.values()), groups

    # The finalized features every node reports in ApiVersions, as a Kafka 4.x cluster has them.
    for node in cluster.brokers:
        features = kafka_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", node.bootstrap,
                              "describe")
        finalized = dict(re.findall(r"Feature: (\S+)\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                                    r"FinalizedVersionLevel: (\S+)", features))
        assert re.fullmatch(r"4\.\d+-IV\d+", finalized.get("metadata.version", "")), features
        assert int(finalized.get("transaction.version", "0")) >= 1, features
        assert int(finalized.get("group.version", "0")) >= 1, features
        assert finalized.get("kraft.version") in ("0", "1"), features


def quorum_replication(bootstrap: str) -> dict:
    """Voter id → (log end offset, last fetch timestamp, last caught-up timestamp), from `kafka-metadata-quorum
    describe --replication`."""
    out = kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server", bootstrap, "describe",
                     "--replication")
    voters = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 7 and f[0].isdigit() and f[-1] in ("Leader", "Follower"):
            voters[int(f[0])] = (int(f[2]), int(f[4]), int(f[5]))
    return voters


def test_a_wiped_voter_recovers_from_a_snapshot(cluster):
    """A follower voter's metadata log is wiped while it is down; the leader's log no longer starts at the first
    entry (purged up to a snapshot), so the voter, restarted, is sent a snapshot, catches up, and votes again: with
    the other follower down, the quorum of leader and wiped voter still commits."""
    leader = controller_id(cluster.bootstrap)
    voters = [n for n in cluster.nodes if "controller" in n.roles]
    wiped, other = [n for n in voters if n.node_id != leader]
    for i in range(12):
        create(cluster.bootstrap, f"snap-{i}", 1)
    leader_node = cluster.node(leader)
    if cluster.kind == "fjord":
        # The first topic's records have left the leader's log: only a snapshot holds them.
        log = leader_node.workdir / "metadata" / "__cluster_metadata-0" / "raft.log"
        wait_for(lambda: b"snap-0" not in log.read_bytes(), "the leader's metadata log purged")

    wiped.kill9()
    shutil.rmtree(wiped.workdir / "metadata")
    if cluster.kind == "kafka":
        wiped.format(cluster.cluster_id, ignore_formatted=True)
    create(cluster.bootstrap, "while-wiped", 1)
    restarted_ms = int(time.time() * 1000)
    wiped.start(timeout_s=120)

    def caught_up():
        voters = quorum_replication(cluster.bootstrap)
        ends = {v: end for v, (end, _, _) in voters.items()}
        return len(ends) == 3 and ends.get(wiped.node_id) == ends.get(controller_id(cluster.bootstrap)) and voters
    voters = wait_for(caught_up, "the wiped voter caught up")
    # The tool's timestamps: the wiped voter fetched and was caught up since it restarted; each answer's times
    # are real (the leader's own being the time of the answer).
    _, fetched, caught = voters[wiped.node_id]
    assert restarted_ms - 1000 <= caught <= fetched <= time.time() * 1000 + 1000, voters
    assert all(f > 0 and c > 0 for _, f, c in voters.values()), voters
    if cluster.kind == "fjord":
        assert (wiped.workdir / "metadata" / "__cluster_metadata-0" / "snapshot").exists()
    if wiped.is_broker:
        names = set(admin(wiped.bootstrap).list_topics(timeout=30).topics)
        assert {f"snap-{i}" for i in range(12)} | {"while-wiped"} <= names

    # The wiped voter is a working voter: without the other follower, its vote makes the majority.
    other.kill9()
    survivors = ",".join(b.bootstrap for b in cluster.brokers if b.node_id != other.node_id)
    create(survivors, "after-wipe", 1)
    assert leaders(survivors, "after-wipe")
    other.start(timeout_s=120)
