"""Jepsen-style fault trials on three combined nodes, each in a network namespace of its own, secured end to end (client,
inter-broker and controller listeners all SASL_SSL with host names checked, the StandardAuthorizer on; `harness.Secured`:
the nodes log in as the super user `node`, the trials' clients as `alice`, whose ACLs allow the trials' topics and
groups): topics with
replication factor 3, min.insync.replicas=2, idempotent acks=all producers (Kafka's VerifiableProducer on Java
kafka-clients, and librdkafka), consumers reading as the faults happen (Kafka's VerifiableConsumer in a group, and
librdkafka from offset 0). One fault per trial, in turn: kill -9 of partition 0's leader, of the active controller,
of a follower; SIGSTOP of the leader past the broker session timeout, then SIGCONT; the leader cut off from the
other nodes (its link down) while a producer and a reader in its own namespace still reach it; a follower killed
and its data dir wiped.

After each trial, healed and quiet, the checker reads every partition back and holds the history to Kafka's
guarantees: every acknowledged record is there exactly once, at the offset it was acknowledged with, each
producer's records in the order it sent them; offsets are dense; whatever any consumer was given during the trial
is there at the same offset (nothing was read that later vanished); the group's consumer was given every
acknowledged record; and the three replicas' logs are byte for byte the same.

FAULT_TRIALS (default 6, one of each fault) sets the number of trials, FAULT_SEED the seed of their timings;
FAULT_TRIAL_LOG, when set, is a file each trial appends its figures to (one JSON object a line). Runs against
fjord, or Apache Kafka with E2E_BROKER=kafka (same KRaft properties).
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from harness import (PYTHON_CLIENTS, Cluster, Network, Secured, fresh_seed, kafka_tools_java,
                     metadata_quorum_status, wait_for, write_properties)

NODES = 3
PARTITIONS = 2
SESSION_MS = 4000
LAG_MS = 2000
RATE = 40  # records a second, per producer
PRODUCE_S = 20
FAULTS = ["kill9-leader", "kill9-controller", "kill9-follower", "pause-leader", "partition-leader",
          "wipe-follower"]
TRIALS = int(os.environ.get("FAULT_TRIALS", "6"))
SEED = int(os.environ.get("FAULT_SEED", "0")) or fresh_seed()


@pytest.fixture(scope="module")
def net():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    n = Network(NODES)
    yield n
    n.close()


@pytest.fixture(scope="module")
def cluster(net, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("trials")
    hosts = [net.address(i) for i in range(1, NODES + 1)]
    secured = Secured(workdir, hosts)
    c = Cluster(workdir, controllers=NODES,
                extra={**secured.node_props(), "broker.session.timeout.ms": str(SESSION_MS),
                       "broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": str(LAG_MS),
                       "offsets.topic.replication.factor": "3", "min.insync.replicas": "2"},
                hosts=hosts, prefixes=[net.prefix(i) for i in range(1, NODES + 1)], metadata_dirs=True,
                broker_listener="BROKER")
    c.secured = secured
    c.start()
    grants = [AclBinding(ResourceType.TOPIC, "trial-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                         AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    grants.append(AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.READ, AclPermissionType.ALLOW))
    admin = AdminClient(client(c, "node"))
    for future in admin.create_acls(grants).values():
        future.result(60)
    yield c
    c.kill9()


def client(cluster: Cluster, user: str, bootstrap: str = None) -> dict:
    """confluent-kafka's settings to reach the cluster (or `bootstrap`) as `user`."""
    return {"bootstrap.servers": bootstrap or cluster.bootstrap, **cluster.secured.librdkafka(user)}


def describe(config: dict, topic: str) -> dict:
    """Partition → (leader, replicas, isr)."""
    admin = AdminClient(config)
    t = admin.list_topics(topic, timeout=10).topics[topic]
    if t.error is not None:
        return {}
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def all_in_sync(config: dict, topic: str, deadline_s: float) -> dict:
    ids = list(range(1, NODES + 1))
    return wait_for(lambda: (lambda d: d if len(d) == PARTITIONS and all(
        isr == ids and leader > 0 for leader, _, isr in d.values()) else None)(describe(config, topic)),
        lambda: f"{topic}: not every partition led with all replicas in sync: {describe(config, topic)}",
        deadline_s)


class Workers:
    """The trial's client processes, each writing its history to a file of its own."""

    def __init__(self, workdir: Path, topic: str, secured: Secured):
        self.workdir = workdir
        self.topic = topic
        self.procs = {}
        self.secured = secured
        # Every client logs in as alice: librdkafka's settings (history_worker.py reads them from the environment)
        # and the Java tools' properties.
        self.env = {**os.environ, "HISTORY_CLIENT_CONFIG": json.dumps(secured.librdkafka("alice"))}

    def spawn(self, name: str, cmd: list) -> None:
        out = open(self.workdir / f"{name}.out", "wb")
        err = open(self.workdir / f"{name}.err", "wb")
        self.procs[name] = subprocess.Popen(cmd, stdout=out, stderr=err, env=self.env)

    def history_producer(self, name: str, bootstrap: str, prefix: int, prefix_cmd=()) -> None:
        self.spawn(name, [*prefix_cmd, sys.executable, str(PYTHON_CLIENTS / "history_worker.py"), "produce",
                          bootstrap, self.topic, str(PARTITIONS), str(prefix), str(RATE), str(PRODUCE_S),
                          str(self.workdir / f"{name}.history")])

    def history_reader(self, name: str, bootstrap: str, prefix_cmd=()) -> None:
        self.spawn(name, [*prefix_cmd, sys.executable, str(PYTHON_CLIENTS / "history_worker.py"), "read",
                          bootstrap, self.topic, str(PARTITIONS), str(self.workdir / f"{name}.history")])

    def verifiable_producer(self, name: str, bootstrap: str, prefix: int) -> None:
        config = self.workdir / f"{name}.properties"
        write_properties(config, {**self.secured.java("alice"), "enable.idempotence": "true",
                                  "retries": "2147483647", "max.in.flight.requests.per.connection": "5",
                                  "delivery.timeout.ms": "30000", "request.timeout.ms": "10000", "linger.ms": "5"})
        self.spawn(name, [*kafka_tools_java(),
                          "org.apache.kafka.tools.VerifiableProducer", "--topic", self.topic, "--bootstrap-server",
                          bootstrap, "--max-messages", str(RATE * PRODUCE_S), "--throughput", str(RATE), "--acks",
                          "-1", "--value-prefix", str(prefix), "--producer.config", str(config)])

    def verifiable_consumer(self, name: str, bootstrap: str, group: str) -> None:
        config = self.workdir / f"{name}.properties"
        write_properties(config, self.secured.java("alice"))
        self.spawn(name, [*kafka_tools_java(),
                          "org.apache.kafka.tools.VerifiableConsumer", "--topic", self.topic, "--bootstrap-server",
                          bootstrap, "--group-id", group, "--reset-policy", "earliest", "--verbose",
                          "--session-timeout", "10000", "--consumer.config", str(config)])

    def wait(self, names: list, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        for name in names:
            try:
                self.procs[name].wait(max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{name} still running after {deadline_s}s")
            assert self.procs[name].returncode == 0, f"{name} exited {self.procs[name].returncode}"

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def java_events(self, name: str) -> list:
        events = []
        for line in (self.workdir / f"{name}.out").read_text(errors="replace").splitlines():
            if line.startswith("{"):
                events.append(json.loads(line))
        return events

    def lines(self, name: str) -> list:
        path = self.workdir / f"{name}.history"
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def acknowledged(workers: Workers, producers: dict) -> dict:
    """value → (partition, offset) of every record a producer had acknowledged."""
    acks = {}
    for name, kind in producers.items():
        if kind == "java":
            rows = [(e["value"], e["partition"], e["offset"]) for e in workers.java_events(name)
                    if e.get("name") == "producer_send_success"]
        else:
            rows = [(v, int(p), int(o)) for tag, p, o, v in (r for r in workers.lines(name) if r[0] == "ok")]
        for value, partition, offset in rows:
            assert value not in acks, f"{value} acknowledged twice"
            acks[value] = (partition, offset)
    return acks


def observed(workers: Workers, readers: dict) -> list:
    """(reader, partition, offset, value) of every record a consumer was given."""
    seen = []
    for name, kind in readers.items():
        if kind == "java":
            seen += [(name, e["partition"], e["offset"], e["value"]) for e in workers.java_events(name)
                     if e.get("name") == "record_data"]
        else:
            seen += [(name, int(p), int(o), v) for p, o, v in workers.lines(name)]
    return seen


def read_back(config: dict, topic: str) -> dict:
    """Partition → {offset: value}, every record below each partition's high watermark."""
    c = Consumer({**config, "group.id": "trial-checker", "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS) if ends[p] > 0])
        log = {p: {} for p in range(PARTITIONS)}
        end = time.monotonic() + 60
        while any(len(log[p]) < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < end, f"read {[len(log[p]) for p in log]} of {ends}"
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            assert m.offset() not in log[m.partition()], f"offset {m.offset()} read twice"
            log[m.partition()][m.offset()] = m.value().decode()
        return log
    finally:
        c.close()


def log_bytes(node, topic: str, partition: int) -> bytes:
    d = Path(node.data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def active_controller(cluster: Cluster) -> int:
    config = cluster.secured.java_config("node")
    return wait_for(lambda: (lambda s: int(s.get("LeaderId", "-1")) if int(s.get("LeaderId", "-1")) > 0 else None)(
        metadata_quorum_status(cluster.bootstrap, command_config=config)), "no active controller", 60)


def heal_everything(net: Network, cluster: Cluster) -> None:
    """Whatever an earlier trial left broken: every link up, every node running and not stopped."""
    for i in range(1, NODES + 1):
        net.heal(i)
    for node in cluster.nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGCONT)
        else:
            node.start(timeout_s=120)


def inject(fault: str, rng: random.Random, net: Network, cluster: Cluster, leader: int, replicas: list,
           workers: Workers) -> dict:
    """Applies the fault to the running workload and heals it; what was done."""
    followers = [r for r in replicas if r != leader]
    if fault == "kill9-controller":
        victim = active_controller(cluster)
    elif fault in ("kill9-follower", "wipe-follower"):
        victim = rng.choice(followers)
    else:
        victim = leader
    node = cluster.node(victim)
    hold = round(rng.uniform(2, 5), 1)
    if fault.startswith("kill9") or fault == "wipe-follower":
        node.kill9()
        time.sleep(hold)
        if fault == "wipe-follower":
            shutil.rmtree(node.data_dir)
            node.data_dir.mkdir()
            if cluster.kind == "kafka":
                node.format(cluster.cluster_id, ignore_formatted=True)
        node.start(timeout_s=120)
    elif fault == "pause-leader":
        hold = round(SESSION_MS / 1000 + hold, 1)
        node.proc.send_signal(signal.SIGSTOP)
        time.sleep(hold)
        node.proc.send_signal(signal.SIGCONT)
    elif fault == "partition-leader":
        # Clients inside the leader's namespace reach it alone once it is cut off.
        workers.history_producer("cut-off-producer", node.bootstrap, 3, prefix_cmd=net.prefix(victim))
        workers.history_reader("cut-off-reader", node.bootstrap, prefix_cmd=net.prefix(victim))
        time.sleep(1)
        hold = round(SESSION_MS / 1000 + hold, 1)
        net.isolate(victim)
        time.sleep(hold)
        net.heal(victim)
    else:
        raise ValueError(fault)
    return {"victim": victim, "hold_s": hold}


@pytest.mark.parametrize("trial", range(TRIALS))
def test_fault_trial(net, cluster, tmp_path, trial):
    rng = random.Random(SEED * 1009 + trial)
    fault = FAULTS[trial % len(FAULTS)]
    topic = f"trial-{trial}"
    everyone = cluster.bootstrap
    heal_everything(net, cluster)
    admin = AdminClient(client(cluster, "node"))
    for _, f in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)]).items():
        f.result(60)
    leader, replicas, _ = all_in_sync(client(cluster, "node"), topic, 60)[0]

    workers = Workers(tmp_path, topic, cluster.secured)
    producers = {"verifiable-producer": "java", "librdkafka-producer": "librdkafka"}
    readers = {"verifiable-consumer": "java", "librdkafka-reader": "librdkafka"}
    try:
        workers.verifiable_producer("verifiable-producer", everyone, 1)
        workers.history_producer("librdkafka-producer", everyone, 2)
        workers.verifiable_consumer("verifiable-consumer", everyone, f"group-{trial}")
        workers.history_reader("librdkafka-reader", everyone)
        time.sleep(rng.uniform(2, 4))
        started = time.monotonic()
        done = inject(fault, rng, net, cluster, leader, replicas, workers)
        healed_after = time.monotonic() - started
        if fault == "partition-leader":
            producers["cut-off-producer"] = "librdkafka"
            readers["cut-off-reader"] = "librdkafka"
        workers.wait(list(producers), 150)
        all_in_sync(client(cluster, "node"), topic, 120)
        log = read_back(client(cluster, "alice"), topic)
        acks = acknowledged(workers, producers)
        group_wants = {v for v, (p, o) in acks.items()}
        # The readers catch up with the end of the log before they stop.
        wait_for(lambda: group_wants <= {v for r, _, _, v in observed(workers, readers)
                                         if r == "verifiable-consumer"},
                 "the group's consumer was not given every acknowledged record", 60)
        total = sum(len(log[p]) for p in log)
        wait_for(lambda: len({(p, o) for r, p, o, _ in observed(workers, readers)
                              if r == "librdkafka-reader"}) >= total,
                 "the reader did not reach the end of the log", 60)
    finally:
        workers.stop()
    seen = observed(workers, readers)

    # Dense offsets from 0, each value once.
    values = {}
    for p in range(PARTITIONS):
        assert sorted(log[p]) == list(range(len(log[p]))), f"partition {p}: offsets not dense"
        for o, v in log[p].items():
            assert v not in values, f"{v} stored twice: at {values[v]} and {(p, o)}"
            values[v] = (p, o)
    # Every acknowledged record where it was acknowledged.
    lost = {v: at for v, at in acks.items() if values.get(v) != at}
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {sorted(lost.items())[:5]}"
    # Each producer's records in the order it sent them, per partition.
    for p in range(PARTITIONS):
        last = {}
        for o in sorted(log[p]):
            producer, n = log[p][o].split(".")
            assert int(n) > last.get(producer, -1), f"partition {p}: {log[p][o]} at {o} after {producer}.{last[producer]}"
            last[producer] = int(n)
    # Nothing a consumer was given vanished or moved.
    vanished = [(r, p, o, v) for r, p, o, v in seen if log[p].get(o) != v]
    assert not vanished, f"{len(vanished)} records read then gone, e.g. {vanished[:5]}"
    # The replicas end byte for byte the same.
    for p in range(PARTITIONS):
        wait_for(lambda: len({log_bytes(n, topic, p) for n in cluster.nodes}) == 1,
                 f"partition {p}: the replicas' logs differ", 60)

    figures = {"trial": trial, "seed": SEED, "fault": fault, **done, "healed_after_s": round(healed_after, 1),
               "acknowledged": len(acks), "stored": len(values), "read": len(seen), "broker": cluster.kind}
    print(json.dumps(figures))
    if os.environ.get("FAULT_TRIAL_LOG"):
        with open(os.environ["FAULT_TRIAL_LOG"], "a") as f:
            f.write(json.dumps(figures) + "\n")
