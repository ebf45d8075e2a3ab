"""Broker membership on a cluster of three controllers and three brokers, with real clients: a broker that dies or
stalls is fenced after its session timeout and its partitions go offline (replication factor 1: no other replica
can lead them), and it leads them again when it returns; a second process with a live broker's node.id is refused;
a broker stopped with SIGTERM has its leadership moved before it exits and rejoins at once. Runs against fjord, or
Apache Kafka with E2E_BROKER=kafka (same KRaft properties).
"""

import signal
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Cluster, kafka_tool

SESSION_MS = 6000
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("membership"), controllers=3, brokers=3,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000"})
    c.start()
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    for _, f in a.create_topics([NewTopic("members", num_partitions=PARTITIONS, replication_factor=1)]).items():
        f.result(30)
    yield c
    c.kill9()


def others(cluster, node) -> str:
    return ",".join(b.bootstrap for b in cluster.brokers if b.node_id != node.node_id)


def view(bootstrap: str):
    """(live broker ids, partition → leader) as a client of `bootstrap` sees them."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("members", timeout=10)
    return sorted(md.brokers), {p.id: p.leader for p in md.topics["members"].partitions.values()}


def wait_view(bootstrap: str, check, what: str, deadline_s: float):
    end = time.monotonic() + deadline_s
    while True:
        brokers, leaders = view(bootstrap)
        if check(brokers, leaders):
            return brokers, leaders
        assert time.monotonic() < end, f"{what}: brokers {brokers}, leaders {leaders}"
        time.sleep(0.2)


def settled(cluster):
    """Every broker live and every partition led, as each broker tells it (a broker that just resumed answers from
    the metadata it had until it catches up); returns partition → leader."""
    ids = sorted(b.node_id for b in cluster.brokers)
    views = [wait_view(b.bootstrap, lambda b, l: b == ids and all(x >= 0 for x in l.values()),
                       "cluster not settled", 60)[1] for b in cluster.brokers]
    assert all(v == views[0] for v in views), views
    return views[0]


def produce(bootstrap: str, partitions, tag: str, per_partition: int = 20) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60000})
    errors = []
    for partition in partitions:
        for i in range(per_partition):
            p.produce("members", value=f"{tag}-{partition}-{i}", partition=partition,
                      on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(90) == 0
    assert errors == []


def read(bootstrap: str, partition: int) -> list:
    def consumer():
        return Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "enable.auto.commit": False})

    # Leadership that just moved (a leader not yet applying its election, a resumed broker replaying the metadata
    # log it missed, its partitions briefly without a leader) answers NOT_LEADER_OR_FOLLOWER or no leader for a
    # moment. librdkafka keeps a partition it saw without a leader as unknown in its metadata cache and answers
    # the watermark query from that cache again, so each retry starts a new consumer.
    c = consumer()
    end = time.monotonic() + 30
    while True:
        try:
            _, high = c.get_watermark_offsets(TopicPartition("members", partition), timeout=30)
            break
        except KafkaException as e:
            transient = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                         KafkaError._UNKNOWN_PARTITION)
            if e.args[0].code() not in transient or time.monotonic() > end:
                raise
            c.close()
            time.sleep(0.2)
            c = consumer()
    c.assign([TopicPartition("members", partition, 0)])
    values = []
    end = time.monotonic() + 60
    while len(values) < high and time.monotonic() < end:
        m = c.poll(1)
        if m is not None and not m.error():
            values.append(m.value().decode())
    c.close()
    assert len(values) == high, f"partition {partition}: read {len(values)} of {high}"
    return values


def endpoint_states(bootstrap: str, include_fenced: bool) -> dict:
    """Broker id → STATE column of Kafka's `kafka-cluster list-endpoints` (empty without the fenced option)."""
    out = kafka_tool("org.apache.kafka.tools.ClusterTool", "list-endpoints", "--bootstrap-server", bootstrap,
                     *(["--include-fenced-brokers"] if include_fenced else []))
    rows = [line.split() for line in out.splitlines() if line.strip()]
    header = rows[0]
    state = header.index("STATE") if "STATE" in header else None
    return {r[0]: (r[state] if state is not None else "") for r in rows[1:]}


def led_by(leaders: dict, node_id: int) -> list:
    return sorted(p for p, l in leaders.items() if l == node_id)


@pytest.mark.parametrize("fault", ["kill9", "sigstop"])
def test_a_dead_or_stalled_broker_is_fenced_and_leads_its_partitions_again_when_back(cluster, fault):
    leaders = settled(cluster)
    victim = cluster.brokers[1]
    mine = led_by(leaders, victim.node_id)
    assert mine, leaders
    produce(cluster.bootstrap, range(PARTITIONS), f"before-{fault}")
    before = {p: read(cluster.bootstrap, p) for p in mine}
    rest = others(cluster, victim)
    if fault == "kill9":
        victim.kill9()
    else:
        victim.proc.send_signal(signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        # Fenced after the session timeout: gone from the brokers clients see, its partitions offline.
        wait_view(rest, lambda b, l: victim.node_id not in b and all(l[p] == -1 for p in mine),
                  "not fenced", SESSION_MS / 1000 + 30)
        assert time.monotonic() - stopped > SESSION_MS / 1000 * 0.5, "fenced well before its session timed out"
        # Still registered: `kafka-cluster list-endpoints --include-fenced-brokers` (DescribeCluster v2) lists it as
        # fenced, the others as unfenced; without the option it is left out.
        states = endpoint_states(rest, include_fenced=True)
        assert states.get(str(victim.node_id)) == "fenced", states
        assert sorted(v for k, v in states.items() if k != str(victim.node_id)) == ["unfenced"] * (len(states) - 1)
        assert str(victim.node_id) not in endpoint_states(rest, include_fenced=False)
        # The other partitions keep working.
        produce(rest, [p for p in range(PARTITIONS) if p not in mine], f"during-{fault}")
    finally:
        if fault == "kill9":
            victim.start(timeout_s=120)
        else:
            victim.proc.send_signal(signal.SIGCONT)
    # Back: it leads the same partitions again, with everything they had, and takes writes.
    after = settled(cluster)
    assert led_by(after, victim.node_id) == mine
    for p in mine:
        assert read(cluster.bootstrap, p) == before[p]
    produce(cluster.bootstrap, mine, f"after-{fault}")


def test_sigterm_moves_leadership_before_exit_and_the_broker_rejoins_at_once(cluster):
    leaders = settled(cluster)
    victim = cluster.brokers[2]
    mine = led_by(leaders, victim.node_id)
    assert mine, leaders
    rest = others(cluster, victim)
    victim.stop()
    # A controlled shutdown leaves nothing to time out: the others see it gone at once.
    wait_view(rest, lambda b, l: victim.node_id not in b and all(l[p] == -1 for p in mine),
              "leadership not moved at shutdown", SESSION_MS / 1000 / 2)
    if cluster.kind == "fjord":
        assert "controlled shutdown" in victim.log_path().read_text(errors="replace")
    # Its registration is not live any more, so a restart registers at once.
    started = time.monotonic()
    victim.start(timeout_s=120)
    if cluster.kind == "fjord":
        assert time.monotonic() - started < SESSION_MS / 1000, "waited for a session that should have ended"
    after = settled(cluster)
    assert led_by(after, victim.node_id) == mine
    produce(cluster.bootstrap, mine, "after-sigterm")


def test_a_second_process_with_a_live_brokers_node_id_is_refused(cluster, tmp_path):
    settled(cluster)
    taken = cluster.brokers[0].node_id
    impostor = cluster.extra_broker(tmp_path / "impostor", taken)
    impostor.starts += 1
    impostor.spawn()
    try:
        # Refused for as long as the real broker heartbeats: it exits (fjord once the session it waited out has
        # passed; Kafka when initial.broker.registration.timeout.ms runs out) and never serves.
        impostor.proc.wait(120)
    finally:
        impostor.kill9()
    assert impostor.proc.returncode != 0
    assert not impostor.ready(), "the impostor served"
    if cluster.kind == "kafka":
        # Kafka 4.4 refuses the registration too, but the refused process still reports its own (empty) log dir for
        # the live broker's partitions (offline-dir-assignment), which leaves them without a leader: fjord does not
        # let a refused process touch anything. (Last in this module for that reason.)
        return
    assert "already registered by a live broker" in impostor.log_path().read_text(errors="replace")
    brokers, _ = view(cluster.bootstrap)
    assert taken in brokers
    assert settled(cluster)
