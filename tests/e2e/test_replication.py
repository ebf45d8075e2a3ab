"""ISR replication on three combined nodes, with real clients: topics with replication factor 3 keep every record
acknowledged with acks=all through kill -9 of a partition's leader, the replicas' logs end byte for byte the same,
acks=all is refused while the ISR is smaller than min.insync.replicas, a stalled follower leaves the ISR before its
session ends, and replicas that come back rejoin it. Transactions across nodes: KIP-890's checks by leaders that
are not the coordinator, markers through a leader's kill -9, and Kafka's exactly-once copy through kills of a
coordinator and a leader. Runs against fjord, or Apache Kafka with E2E_BROKER=kafka (same
KRaft properties).
"""

import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

from copier import MESSAGES, copy_exactly_once
from test_transactions import timed_out_transaction_is_aborted, zombie_is_fenced
from wordcount import count_words_exactly_once
from harness import (CLIENTS, Cluster, check_implicit_add, franz_go_tests, implicit_add, kafka_tool,
                     metadata_quorum_status, read_until_quiet, round_trip, run_tool, start_tool, unadded_produce,
                     wait_for)

SESSION_MS = 6000
LAG_MS = 2000
PARTITIONS = 3
SHARE_STATE_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # The share coordinator's state replicated as Kafka's defaults have it (the harness gives Kafka one replica),
    # on a few partitions to keep restarts quick; share group members heartbeat every second (they learn of
    # partitions initialized since on their next heartbeat).
    c = Cluster(tmp_path_factory.mktemp("replication"), controllers=3,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
                       "replica.lag.time.max.ms": str(LAG_MS),
                       "share.coordinator.state.topic.replication.factor": "3",
                       "share.coordinator.state.topic.min.isr": "2",
                       "share.coordinator.state.topic.num.partitions": str(SHARE_STATE_PARTITIONS),
                       "group.share.heartbeat.interval.ms": "1000",
                       "group.share.min.heartbeat.interval.ms": "1000"})
    c.start()
    yield c
    c.kill9()


def create(bootstrap: str, name: str, min_isr: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": str(min_isr)})
    for _, f in a.create_topics([topic]).items():
        f.result(30)


def describe(bootstrap: str, topic: str) -> dict:
    """Partition → (leader, replicas, isr)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        return {}
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Records first..first+count, record i to partition i % PARTITIONS; every one acknowledged (acks=all)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    errors = []
    for i in range(first, first + count):
        p.produce(topic, value=str(i), partition=i % PARTITIONS,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(90) == 0
    assert errors == []


def read_all(bootstrap: str, topic: str, expected: int) -> dict:
    """Partition → values, from offset 0, until `expected` records came."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict = {p: [] for p in range(PARTITIONS)}
    n = 0
    end = time.monotonic() + 90
    while n < expected and time.monotonic() < end:
        m = c.poll(1)
        if m is None or m.error():
            continue
        assert m.offset() == len(got[m.partition()]), "offsets dense and in order"
        got[m.partition()].append(int(m.value()))
        n += 1
    c.close()
    assert n == expected, f"read {n} of {expected}"
    return got


def all_in_sync(bootstrap: str, topic: str, ids: list, deadline_s: float = 60) -> None:
    wait_for(lambda: (lambda d: len(d) == PARTITIONS and all(isr == ids and l >= 0 for l, _, isr in d.values()))(
        describe(bootstrap, topic)), f"{topic}: every partition led with {ids} in sync", deadline_s)


def under_replicated(bootstrap: str, topic: str) -> list:
    """The partitions `kafka-topics --describe --under-replicated-partitions` (Kafka's own tool) lists."""
    out = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--describe",
                     "--under-replicated-partitions", "--topic", topic)
    return re.findall(r"Partition: (\d+)", out)


def log_bytes(node, topic: str, partition: int) -> bytes:
    """A replica's whole log: its segments' bytes in offset order."""
    d = Path(node.data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_acks_all_records_survive_the_leaders_kill9_and_the_replicas_end_identical(cluster):
    create(cluster.bootstrap, "rf3", min_isr=2)
    ids = sorted(n.node_id for n in cluster.nodes)
    all_in_sync(cluster.bootstrap, "rf3", ids)
    produce(cluster.bootstrap, "rf3", 0, 3000)

    leader = describe(cluster.bootstrap, "rf3")[0][0]
    victim = cluster.node(leader)
    victim.kill9()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
    # A new leader from the ISR; the records acknowledged before the kill are all there, and writing goes on.
    wait_for(lambda: (lambda d: d and d[0][0] not in (-1, leader))(describe(survivors, "rf3")),
             "partition 0 led by a surviving in-sync replica", SESSION_MS / 1000 + 30)
    produce(survivors, "rf3", 3000, 3000)
    got = read_all(survivors, "rf3", 6000)
    for p, values in got.items():
        assert values == [i for i in range(6000) if i % PARTITIONS == p], f"partition {p}: exactly once, in order"

    # Back, the old leader truncates what it alone had, catches up, rejoins the ISR, and every replica holds the
    # same bytes.
    victim.start(timeout_s=120)
    all_in_sync(cluster.bootstrap, "rf3", ids)
    for p in range(PARTITIONS):
        wait_for(lambda: len({log_bytes(n, "rf3", p) for n in cluster.nodes}) == 1,
                 f"partition {p}: replicas differ", 60)
    assert len(log_bytes(victim, "rf3", 0)) > 0


def test_acks_all_is_refused_while_the_isr_is_below_min_insync_replicas(cluster):
    create(cluster.bootstrap, "strict", min_isr=3)
    ids = sorted(n.node_id for n in cluster.nodes)
    all_in_sync(cluster.bootstrap, "strict", ids)
    produce(cluster.bootstrap, "strict", 0, 30)

    victim = cluster.node(describe(cluster.bootstrap, "strict")[0][1][-1])
    victim.kill9()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != victim.node_id)
    # Fenced after its session: out of every ISR.
    wait_for(lambda: (lambda d: d and all(victim.node_id not in isr and l >= 0 for l, _, isr in d.values()))(
        describe(survivors, "strict")), "the dead node left the ISR", SESSION_MS / 1000 + 30)

    refused = []
    p = Producer({"bootstrap.servers": survivors, "acks": "all", "retries": 0, "message.timeout.ms": 20000})
    for partition in range(PARTITIONS):
        p.produce("strict", value=b"x", partition=partition, on_delivery=lambda e, m: refused.append(e))
    p.flush(30)
    assert len(refused) == PARTITIONS
    assert all(e is not None and e.code() in (KafkaError.NOT_ENOUGH_REPLICAS,
                                              KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND) for e in refused), refused
    # acks=1 needs the leader only.
    acked = []
    p = Producer({"bootstrap.servers": survivors, "acks": 1, "message.timeout.ms": 20000})
    for partition in range(PARTITIONS):
        p.produce("strict", value=b"y", partition=partition, on_delivery=lambda e, m: acked.append(e))
    p.flush(30)
    assert acked == [None] * PARTITIONS
    # Back in the ISR, acks=all is served again.
    victim.start(timeout_s=120)
    all_in_sync(cluster.bootstrap, "strict", ids)
    produce(cluster.bootstrap, "strict", 30, 30)


def test_a_stalled_follower_leaves_the_isr_before_its_session_ends_and_rejoins(cluster):
    create(cluster.bootstrap, "stall", min_isr=2)
    ids = sorted(n.node_id for n in cluster.nodes)
    all_in_sync(cluster.bootstrap, "stall", ids)
    d = describe(cluster.bootstrap, "stall")
    # Neither partition 0's leader nor the active controller: the leader's request must be committed at once.
    controller = int(metadata_quorum_status(cluster.bootstrap)["LeaderId"])
    victim = cluster.node(next(i for i in ids if i not in (d[0][0], controller)))
    others = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != victim.node_id)
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        stalled = time.monotonic()
        # A follower level with its leader's log end counts as caught up (as in Kafka): records it cannot fetch
        # start its lag.
        p = Producer({"bootstrap.servers": others, "acks": 1})
        p.produce("stall", value=b"-1", partition=0)
        assert p.flush(10) == 0
        # Out of partition 0's ISR after the lag time, by its leader's AlterPartition: the controller has not fenced
        # it (its session is three times longer), so clients still see the broker.
        wait_for(lambda: victim.node_id not in describe(others, "stall")[0][2], "the stalled follower left the ISR",
                 SESSION_MS / 1000)
        md = AdminClient({"bootstrap.servers": others}).list_topics(timeout=10)
        assert victim.node_id in md.brokers, f"fenced after {time.monotonic() - stalled:.1f}s: not an ISR shrink"
        # Two in sync meet min.insync.replicas=2: acks=all goes on without it.
        produce(others, "stall", 0, 300)
        assert "0" in under_replicated(others, "stall")
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    # Asked of the nodes that never stopped: a node just resumed answers from its old metadata until it catches up.
    all_in_sync(others, "stall", ids)
    # Kafka's tool asks whichever node it reaches, which may apply the ISR's growth a moment later.
    wait_for(lambda: under_replicated(others, "stall") == [], "no partition under-replicated", 30)
    got = read_all(cluster.bootstrap, "stall", 301)
    assert sorted(v for values in got.values() for v in values) == [-1] + list(range(300))


def retired_dirs(node, topic: str, partition: int, suffix: str) -> list:
    """A replica's renamed dirs of one partition: `<topic>-<partition>.<id>-delete` or `-stray`."""
    return [d.name for d in Path(node.data_dir).glob(f"{topic}-{partition}.*{suffix}")]


def test_a_replica_down_while_its_topic_is_deleted_and_made_again_sets_its_old_log_aside(cluster):
    """A topic deleted and made again under its name while one of its replicas is down: back, that replica sets its
    log of the old topic aside (renamed `-stray`, kept, as Kafka does) and copies the new topic's records, ending
    byte for byte the same as the other replicas. The replicas that saw the deletion renamed their logs `-delete`
    (removed after log.segment.delete.delay.ms)."""
    topic = "reborn"
    ids = sorted(n.node_id for n in cluster.nodes)
    victim = cluster.node(ids[-1])
    others = [n for n in cluster.nodes if n is not victim]
    survivors = ",".join(n.bootstrap for n in others)
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _, f in a.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[ids])]).items():
        f.result(30)
    wait_for(lambda: describe(cluster.bootstrap, topic).get(0, (-1, [], []))[2] == ids, "every replica in sync", 60)
    # A batch each: a replica that kept its old log and truncated it where the new topic's log ends would keep
    # whole batches of the old topic's records.
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(50):
        p.produce(topic, value=f"old-{i}", partition=0)
        assert p.flush(30) == 0
    wait_for(lambda: len(log_bytes(victim, topic, 0)) > 0, "the old records reached the victim", 30)

    victim.kill9()
    wait_for(lambda: victim.node_id not in AdminClient({"bootstrap.servers": survivors}).list_topics(timeout=10).brokers,
             "the dead node fenced", SESSION_MS / 1000 + 30)
    a = AdminClient({"bootstrap.servers": survivors})
    for _, f in a.delete_topics([topic]).items():
        f.result(30)
    wait_for(lambda: describe(survivors, topic) == {}, "the topic gone", 30)
    for n in others:
        wait_for(lambda: retired_dirs(n, topic, 0, "-delete"), f"node {n.node_id}: the old log renamed -delete", 30)
    # The same name, the dead node first in the assignment: the others lead until it is back.
    assignment = [victim.node_id] + [n.node_id for n in others]
    wait_for(lambda: all(f.exception(30) is None for f in a.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[assignment])]).values()), "the topic made again", 30)
    wait_for(lambda: describe(survivors, topic).get(0, (-1,))[0] in [n.node_id for n in others], "a leader", 30)
    p = Producer({"bootstrap.servers": survivors, "acks": "all"})
    for i in range(20):
        p.produce(topic, value=f"new-{i}", partition=0)
    assert p.flush(30) == 0

    victim.start(timeout_s=120)
    wait_for(lambda: describe(cluster.bootstrap, topic).get(0, (-1, [], []))[2] == ids, "back in sync", 60)
    wait_for(lambda: len({log_bytes(n, topic, 0) for n in cluster.nodes}) == 1, "replicas differ", 60)
    assert retired_dirs(victim, topic, 0, "-stray"), "the old topic's log set aside"
    values = [m.value().decode() for m in read_until_quiet(cluster.bootstrap, topic, 1, 20)]
    assert values == [f"new-{i}" for i in range(20)]


def test_coordinators_take_no_write_while_their_partitions_isr_is_below_min_insync_replicas(tmp_path):
    """Group and transaction coordinators write with acks=all: on three nodes whose `__consumer_offsets` and
    `__transaction_state` have three replicas and need all three in sync (`min.insync.replicas`,
    `transaction.state.log.min.isr`), with one node dead an offset commit and a transactional InitProducerId are not
    taken (the clients retry, then give up; OffsetFetch does not see the commit tried); with the node back in the
    ISR, both go through."""
    c = Cluster(tmp_path, controllers=3,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
                       "replica.lag.time.max.ms": str(LAG_MS), "offsets.topic.replication.factor": "3",
                       "transaction.state.log.replication.factor": "3", "transaction.state.log.num.partitions": "3",
                       "transaction.state.log.min.isr": "3", "min.insync.replicas": "3"})
    c.start()
    try:
        coordinators_refuse_writes_under_min_isr(c)
    finally:
        c.kill9()


def coordinators_refuse_writes_under_min_isr(c: Cluster) -> None:
    topic, group, transactional_id = "coord-min-isr", "coord-min-isr-group", "coord-min-isr-producer"
    create(c.bootstrap, topic, min_isr=1)
    ids = sorted(n.node_id for n in c.nodes)
    internal = ["__consumer_offsets", "__transaction_state"]
    admin = AdminClient({"bootstrap.servers": c.bootstrap})

    # Each admin client is kept alive until its futures complete (destroying it fails them).
    def commit(bootstrap: str, offset: int, **kw):
        """The commit's error: None when taken (a partition's error, or the whole request's)."""
        a = AdminClient({"bootstrap.servers": bootstrap})
        try:
            result = a.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])], **kw)[group].result(30)
        except KafkaException as e:
            return e.args[0]
        return result.topic_partitions[0].error

    def committed(bootstrap: str) -> int:
        a = AdminClient({"bootstrap.servers": bootstrap})
        [result] = a.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]).values()
        return result.result(30).topic_partitions[0].offset

    def isrs(bootstrap: str, t: str) -> list:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(t, timeout=10).topics[t]
        return [sorted(p.isrs) for p in md.partitions.values()] if md.error is None else []

    def transaction(bootstrap: str, timeout_s: float) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        p.init_transactions(timeout_s)
        p.begin_transaction()
        p.produce(topic, value=b"t", partition=0)
        p.commit_transaction(60)

    # Both coordinators exist, every replica in sync (a coordinator just created may still be loading).
    wait_for(lambda: commit(c.bootstrap, 5) is None, "the first commit taken", 60)
    transaction(c.bootstrap, 60)
    for t in internal:
        wait_for(lambda: (lambda i: i and all(isr == ids for isr in i))(isrs(c.bootstrap, t)),
                 f"{t}: every replica in sync", 60)
    coordinators = {coordinator_of(c.bootstrap, transactional_id),
                    admin.describe_consumer_groups([group])[group].result(30).coordinator.id}
    victim = c.node(next(i for i in ids if i not in coordinators))
    survivors = ",".join(n.bootstrap for n in c.nodes if n.node_id != victim.node_id)
    victim.kill9()
    for t in internal:
        wait_for(lambda: (lambda i: i and all(victim.node_id not in isr for isr in i))(isrs(survivors, t)),
                 f"the dead node left {t}'s ISRs", SESSION_MS / 1000 + 30)
    refused = commit(survivors, 9, request_timeout=10)
    assert refused is not None, "a commit taken with too few replicas in sync"
    assert committed(survivors) == 5, f"the refused commit ({refused}) is seen"
    with pytest.raises(KafkaException):
        transaction(survivors, 10)

    victim.start(timeout_s=120)
    for t in internal:
        wait_for(lambda: (lambda i: i and all(isr == ids for isr in i))(isrs(survivors, t)),
                 f"{t}: every replica back in sync", 120)
    wait_for(lambda: commit(survivors, 9) is None, "the commit taken with the node back", 60)
    assert committed(survivors) == 9
    transaction(c.bootstrap, 60)


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_round_trips_at_replication_factor_3(cluster, tmp_path, client):
    """Java kafka-clients, franz-go, librdkafka and kafka-python produce with acks=all to RF=3 partitions led by
    every node and read each acknowledged record back exactly once, in order."""
    topic = f"rf3-{client}"
    create(cluster.bootstrap, topic, min_isr=2)
    all_in_sync(cluster.bootstrap, topic, sorted(n.node_id for n in cluster.nodes))
    round_trip(client, cluster.bootstrap, topic, PARTITIONS, 3000, "zstd", tmp_path)


@pytest.mark.slow
def test_franz_go_kgo_tests_at_replication_factor_3(cluster, tmp_path):
    """franz-go's own pkg/kgo integration tests against the three nodes, its topics at replication factor 3."""
    franz_go_tests(cluster.bootstrap, 3, tmp_path)


def coordinator_of(bootstrap: str, transactional_id: str) -> int:
    """The node coordinating a transactional id, as `kafka-transactions describe` shows it."""
    out = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "describe",
                     "--transactional-id", transactional_id)
    rows = [[cell.strip() for cell in line.split("\t")] for line in out.splitlines() if "\t" in line]
    return int(dict(zip(rows[0], rows[1]))["CoordinatorId"])


def read_committed(bootstrap: str, topic: str, expected: int) -> list:
    """Every value a read_committed consumer finds in the topic, once `expected` came and a quiet spell after."""
    return [m.value().decode() for m in read_until_quiet(bootstrap, topic, PARTITIONS, expected, tolerate_errors=True)]


def test_a_batch_for_a_partition_not_in_the_transaction_is_refused_by_every_leader(cluster):
    """KIP-890 part 1 across nodes: a transactional producer that skips AddPartitionsToTxn (raw Produce v11) has its
    batch refused by every leader, also by those whose transaction coordinator is another node (they ask it before
    the append); the partition it added takes its batch. A group coordinator on another node than the transaction
    coordinator refuses offsets committed in the transaction without AddOffsetsToTxn."""
    topic = "txn-unadded-rf3"
    create(cluster.bootstrap, topic, min_isr=2)
    ids = sorted(n.node_id for n in cluster.nodes)
    all_in_sync(cluster.bootstrap, topic, ids)
    rows, offsets = unadded_produce(cluster.bootstrap, topic, "txn-unadded-producer", added=0,
                                    offsets_group="txn-unadded-group")
    assert len(rows) == PARTITIONS, rows
    assert any(r["leader"] != r["coordinator"] and not r["added"] for r in rows), rows
    assert [r["error"] for r in rows if r["added"]] == [0], rows
    # TRANSACTION_ABORTABLE (Produce v11 knows it).
    assert all(r["error"] == 120 for r in rows if not r["added"]), rows
    # Offsets committed in the transaction without AddOffsetsToTxn, at a group coordinator that is not the
    # transaction coordinator: TRANSACTION_ABORTABLE (TxnOffsetCommit v4).
    assert offsets and int(offsets["coordinator"]) != rows[0]["coordinator"], (offsets, rows)
    assert offsets["error"] == "120", offsets


def test_leaders_on_other_nodes_add_partitions_for_a_producer_on_transaction_version_2(cluster):
    """KIP-890 part 2 across nodes: a producer on transaction version 2 (raw Produce v12, TxnOffsetCommit v5) never
    adds partitions itself; leaders and a group coordinator that are not its transaction coordinator add them over
    the network before appending. The committed transaction is read back, the aborted one is not, and a zombie batch
    with the epoch before EndTxn's bump is refused."""
    topic = "txn-tv2-rf3"
    create(cluster.bootstrap, topic, min_isr=2)
    ids = sorted(n.node_id for n in cluster.nodes)
    all_in_sync(cluster.bootstrap, topic, ids)
    transactional_id = "txn-tv2-producer"
    rows = implicit_add(cluster.bootstrap, topic, transactional_id, offsets_group="txn-tv2-group")
    check_implicit_add(rows, PARTITIONS)
    coordinator = coordinator_of(cluster.bootstrap, transactional_id)
    assert any(int(r["leader"]) != coordinator for r in rows if r["kind"] == "produce"), (coordinator, rows)
    [offsets] = [r for r in rows if r["kind"] == "offsets"]
    assert int(offsets["coordinator"]) != coordinator, (coordinator, rows)
    assert sorted(read_committed(cluster.bootstrap, topic, PARTITIONS)) == [
        f"committed-{p}" for p in range(PARTITIONS)]


def test_a_zombie_producer_is_fenced_at_replication_factor_3(cluster):
    """confluent-kafka's fencing of a zombie (test_transactions.py) on three nodes, its topic at replication factor 3:
    the coordinator and the partitions' leaders are on different nodes."""
    zombie_is_fenced(cluster.bootstrap, 3)


def test_a_timed_out_transaction_is_aborted_at_replication_factor_3(cluster):
    """confluent-kafka's transaction timeout (test_transactions.py) on three nodes, its topic at replication
    factor 3."""
    timed_out_transaction_is_aborted(cluster.bootstrap, 3)


def test_transactions_commit_through_a_partition_leaders_kill9(cluster):
    """A transaction whose coordinator is one node and whose partitions are led by others (the markers go over the
    network) commits through a kill -9 of a partition leader that is not its coordinator: the marker reaches the new
    leader. read_committed consumers then find the committed transactions exactly once and nothing of an aborted
    one."""
    topic = "txn-rf3"
    create(cluster.bootstrap, topic, min_isr=2)
    ids = sorted(n.node_id for n in cluster.nodes)
    all_in_sync(cluster.bootstrap, topic, ids)
    transactional_id = "txn-rf3-producer"
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 60000})
    p.init_transactions(60)
    coordinator = coordinator_of(cluster.bootstrap, transactional_id)

    def send(label: str, count: int) -> None:
        p.begin_transaction()
        for i in range(count):
            p.produce(topic, value=f"{label}-{i}", partition=i % PARTITIONS)
        p.flush(60)

    send("first", 300)
    p.commit_transaction(60)
    send("aborted", 300)
    p.abort_transaction(60)
    send("through-kill", 300)
    leaders = {part: leader for part, (leader, _, _) in describe(cluster.bootstrap, topic).items()}
    victim = next(cluster.node(leader) for leader in leaders.values() if leader != coordinator)
    victim.kill9()
    try:
        p.commit_transaction(90)
        survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != victim.node_id)
        values = read_committed(survivors, topic, 600)
    finally:
        victim.start(timeout_s=120)
    assert sorted(values) == sorted([f"first-{i}" for i in range(300)] + [f"through-kill-{i}" for i in range(300)])
    all_in_sync(cluster.bootstrap, topic, ids)


def test_transactional_copiers_copy_exactly_once_through_kills_of_a_coordinator_and_a_leader(cluster, tmp_path):
    """Kafka's exactly-once copy (copier.py) on three nodes, its topics at replication factor 3: after each copier
    is killed, the node coordinating the first copier's transactions is killed with SIGKILL and restarted, then a
    leader of the output topic (one coordinating no copier's transactions when there is one) as soon as that node is
    back (the other copier, whose coordinator stayed, may have finished by then), while the first copier is
    mid-way. Every input message is in the output exactly once."""
    def kill_and_restart(node_id: int) -> None:
        node = cluster.node(node_id)
        node.kill9()
        node.start(timeout_s=120)

    def kill_the_coordinator(copiers, out_topic):
        kill_and_restart(coordinator_of(cluster.bootstrap, copiers[0].transactional_id))

    def kill_a_leader(copiers, out_topic):
        coordinators = {coordinator_of(cluster.bootstrap, c.transactional_id) for c in copiers}
        leaders = [leader for leader, _, _ in describe(cluster.bootstrap, out_topic).values() if leader >= 0]
        kill_and_restart(next((l for l in leaders if l not in coordinators), leaders[0]))

    # Twice the one-node input: the first copier must still be copying once its coordinator's node is back, and
    # with its transactions moved to another coordinator it can go on while that node restarts (it once finished
    # its 2,000 messages in that time).
    copy_exactly_once(cluster.bootstrap, tmp_path, 3,
                      [("transaction coordinator", 0, kill_the_coordinator), ("partition leader", 0, kill_a_leader)],
                      messages=2 * MESSAGES)


def test_exactly_once_word_count_through_kills_of_the_application_and_a_leader(cluster, tmp_path):
    """The Kafka Streams exactly_once_v2 word count (wordcount.py) on three nodes, every topic (internal ones too) at
    replication factor 3: after the application's kill -9, the leader of the output topic's first partition is
    killed with SIGKILL and restarted while the new instance restores its counts and goes on. Every word's counts
    are exactly 1..n."""
    def kill_a_leader(out_topic):
        node = cluster.node(describe(cluster.bootstrap, out_topic)[0][0])
        node.kill9()
        node.start(timeout_s=120)

    count_words_exactly_once(cluster.bootstrap, tmp_path, 3, kill_a_leader)


def java_hash(text: str) -> int:
    """Java's String.hashCode (the placement of coordinator keys)."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def share_coordinator_of(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """The node leading the `__share_group_state` partition of (group, topic, partition)'s share state."""
    a = AdminClient({"bootstrap.servers": bootstrap})
    topic_id = a.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    h = java_hash(f"{group}:{topic_id}:{partition}")
    state_partition = (0 if h == -(1 << 31) else abs(h)) % SHARE_STATE_PARTITIONS
    return describe(bootstrap, "__share_group_state")[state_partition][0]


def share_report(paths) -> tuple:
    """(deliveries, commits) from the share-consume reports: (partition, offset) → [(delivery count, ms)] and
    (partition, offset) → [(outcome, ms)]."""
    deliveries, commits = defaultdict(list), defaultdict(list)
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            kind, p, o, what, ms = line.split()
            (deliveries if kind == "d" else commits)[(int(p), int(o))].append((what, int(ms)))
    return deliveries, commits


def test_share_acknowledgements_survive_kills_of_the_share_partition_leader_and_the_share_coordinator(
        cluster, tmp_path):
    """Two share consumers acknowledge explicitly while a share-partition leader, then the share coordinator of its
    state, are killed -9 and come back. Every record is accepted with a durable acknowledgement at least once; no
    record is delivered after its acknowledgement was confirmed (commitSync answered it without error); a last
    consumer finds nothing left. Redeliveries and failed acknowledgements are counted."""
    topic, group, records = "share-faults", "share-faults", 1500
    create(cluster.bootstrap, topic, min_isr=2)
    produce(cluster.bootstrap, topic, 0, records)
    kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", cluster.bootstrap, "--entity-type",
               "groups", "--entity-name", group, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    # A few records a poll (KIP-1206's record_limit: not whole batches) and a pause after each, so the consume
    # lasts through both kills.
    config = tmp_path / "consumer.properties"
    config.write_text("share.acquire.mode=record_limit\n")
    reports = [tmp_path / f"report-{i}" for i in range(2)]
    consumers = [start_tool("java", "share-consume", tmp_path / f"consumer-{i}.log", bootstrap=cluster.bootstrap,
                            topic=topic, group=group, out=str(tmp_path / f"out-{i}"), report=str(reports[i]),
                            client_config=str(config), mode="explicit", idle_ms=120000, first_ms=60000,
                            max_poll_records=5, pause_ms=50)
                 for i in range(2)]

    def accepted() -> set:
        return {k for k, outcomes in share_report(reports)[1].items() if any(what == "ok" for what, _ in outcomes)}

    def confirmed() -> int:
        return sum(1 for outcomes in share_report(reports)[1].values() for what, _ in outcomes if what == "ok")

    def kill_and_restart(node_id: int, what: str) -> None:
        before = confirmed()
        node = cluster.node(node_id)
        node.kill9()
        try:
            wait_for(lambda: confirmed() >= before + 200, f"acknowledgements confirmed after {what}'s kill",
                     deadline_s=90)
        finally:
            node.start(timeout_s=120)

    try:
        wait_for(lambda: confirmed() >= 200, "the first acknowledgements", deadline_s=90)
        kill_and_restart(describe(cluster.bootstrap, topic)[0][0], "the share-partition leader")
        kill_and_restart(share_coordinator_of(cluster.bootstrap, group, topic, 0), "the share coordinator")
        wait_for(lambda: len(accepted()) == records, "every record accepted", deadline_s=180)
        for c in consumers:
            c.kill()
            c.wait()
        last = tmp_path / "report-last"
        run_tool("java", "share-consume", wall_s=120, bootstrap=cluster.bootstrap, topic=topic, group=group,
                 out=str(tmp_path / "out-last"), report=str(last), mode="explicit", idle_ms=3000, first_ms=6000)
    finally:
        for c in consumers:
            c.kill()
    deliveries, commits = share_report(reports)
    assert share_report([last]) == ({}, {}), "a last consumer finds records left"
    after_confirmed = sorted(k for k in accepted()
                             if any(ms > min(t for what, t in commits[k] if what == "ok") for _, ms in deliveries[k]))
    assert after_confirmed == [], f"delivered after a confirmed acknowledgement: {after_confirmed[:10]}"
    failed = sum(1 for outcomes in commits.values() for what, _ in outcomes if what != "ok")
    redelivered = sum(1 for ds in deliveries.values() if len(ds) > 1)
    print(f"share faults: {records} records, {redelivered} delivered again, {failed} acknowledgements failed")
