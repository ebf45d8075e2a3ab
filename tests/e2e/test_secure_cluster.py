"""A cluster secured end to end: three combined nodes whose client, inter-broker and controller listeners are all
SASL_SSL (PEM keystore and truststore from one CA, host names checked; PLAIN logins from the listeners' JAAS text),
with the StandardAuthorizer on and the nodes' own principal, User:node, its only super user. Clients log in as
alice, whose ACLs allow one topic prefix and one group.

Replication, the metadata quorum and registration all run over the secured links, and so do delegation tokens:
asked for on a node that is not the active controller, which decides them for the client that asked (the request
forwarded in an Envelope naming it), and used on every node. a topic with replication factor
3 keeps all three replicas in sync, and a node whose inter-broker login is a principal without CLUSTER_ACTION cannot
replicate (it drops out of the ISR) until an ACL grants it, then catches up. (Faults on such a cluster — kills,
pauses, a partition — are test_fault_trials.py's: its cluster is secured the same way.)

One cluster for the module (fjord, or Kafka with E2E_BROKER=kafka).
"""

import subprocess
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from harness import (Cluster, Secured, kafka_tools_java, metadata_quorum_status, read_properties, round_trip,
                     wait_for, write_properties)

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"

PREFIX = "secure-"
GROUP = "secure-readers"
LAG_MS = 3000


class SecureCluster:
    def __init__(self, workdir: Path):
        self.secured = Secured(workdir)
        extra = {**self.secured.node_props(), "offsets.topic.replication.factor": "3",
                 "replica.lag.time.max.ms": str(LAG_MS),
                 # Delegation tokens, authenticated by SCRAM on the client listener.
                 "delegation.token.secret.key": "cluster-token-secret",
                 "listener.name.broker.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                 "listener.name.broker.scram-sha-512.sasl.jaas.config": f"{SCRAM_LOGIN} required;"}
        self.cluster = Cluster(workdir, controllers=3, extra=extra, broker_listener="BROKER")
        self.cluster.start()
        self.admin = AdminClient(self.config("node"))
        acls = [AclBinding(ResourceType.TOPIC, PREFIX, ResourcePatternType.PREFIXED, "User:alice", "*", op,
                           AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
        acls.append(AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.READ, AclPermissionType.ALLOW))
        for future in self.admin.create_acls(acls).values():
            future.result(30)

    def config(self, user: str) -> Dict[str, str]:
        return {"bootstrap.servers": self.cluster.bootstrap, **self.secured.librdkafka(user)}

    def create_topic(self, name: str, partitions: int = 1, **kw) -> None:
        topic = NewTopic(name, partitions, config={"min.insync.replicas": "2"}, **kw) if "replica_assignment" in kw \
            else NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})
        self.admin.create_topics([topic])[name].result(60)

    def isr(self, topic: str) -> List[List[int]]:
        described = self.admin.list_topics(topic, timeout=10).topics[topic]
        return [sorted(p.isrs) for _, p in sorted(described.partitions.items())]

    def leader(self, topic: str, partition: int) -> int:
        return self.admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    s = SecureCluster(tmp_path_factory.mktemp("secure"))
    yield s
    s.cluster.kill9()


def produce(config: Dict[str, str], topic: str, values: List[str]) -> List[Tuple[int, int, str]]:
    """Sends `values` idempotently with acks=all; the (partition, offset, value) of each one acknowledged."""
    acked: List[Tuple[int, int, str]] = []
    failed: List[str] = []

    def delivered(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value().decode()))
        else:
            failed.append(str(err))
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60000})
    for value in values:
        producer.produce(topic, value.encode(), key=value.encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(90) == 0, "records left unsent"
    assert not failed, failed[:3]
    return acked


def read_all(config: Dict[str, str], topic: str, partitions: int, group: str = None) -> Dict[Tuple[int, int], str]:
    """Every record of `topic`, by (partition, offset), read from the start (in `group`, when given)."""
    consumer = Consumer({**config, "group.id": group or "unused", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    ends = {}
    for p in range(partitions):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
    if group:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: Dict[Tuple[int, int], str] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
            len([o for (q, o) in seen if q == p]) < ends[p] for p in range(partitions)):
        msg = consumer.poll(1)
        if msg is None or msg.error():
            continue
        seen[(msg.partition(), msg.offset())] = msg.value().decode()
    if group:
        consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def test_clients_and_replication_run_over_secured_links(secure: SecureCluster):
    topic = PREFIX + "round-trip"
    secure.create_topic(topic, partitions=2)
    alice = secure.config("alice")
    acked = produce(alice, topic, [f"r{i}" for i in range(300)])
    assert len(acked) == 300
    seen = read_all(alice, topic, 2, group=GROUP)
    assert sorted(seen.values()) == sorted(v for _, _, v in acked)
    # Every replica follows over the inter-broker link: all three stay in sync past the lag bound.
    time.sleep(LAG_MS / 1000 * 2)
    assert secure.isr(topic) == [[1, 2, 3], [1, 2, 3]]
    # alice's ACLs end at her prefix.
    denied = Consumer({**alice, "group.id": GROUP}).list_topics("elsewhere", timeout=10).topics["elsewhere"].error
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied


def test_a_broker_without_cluster_action_cannot_replicate(secure: SecureCluster):
    # Node 3 restarts with an inter-broker login that is not a super user.
    node = secure.cluster.node(3)
    props = read_properties(node.config)
    node.stop()
    write_properties(node.config, {**props, "listener.name.broker.plain.sasl.jaas.config":
                                   secure.secured.jaas("mallory")})
    node.start()
    try:
        topic = PREFIX + "guarded"
        secure.create_topic(topic, replica_assignment=[[1, 2, 3]])
        produce(secure.config("node"), topic, [f"g{i}" for i in range(50)])
        # Its fetches are refused: the leader drops it from the ISR once it lags past the bound.
        wait_for(lambda: secure.isr(topic) == [[1, 2]], "node 3 out of the ISR", 30)
        time.sleep(LAG_MS / 1000)
        assert secure.isr(topic) == [[1, 2]]
        grant = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:mallory", "*",
                           AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)
        for future in secure.admin.create_acls([grant]).values():
            future.result(30)
        wait_for(lambda: secure.isr(topic) == [[1, 2, 3]], "node 3 back in the ISR once granted", 60)
    finally:
        node.stop()
        write_properties(node.config, props)
        node.start()


def test_a_delegation_token_is_issued_through_any_node_and_used_on_all(secure: SecureCluster, tmp_path: Path):
    """alice asks for tokens through a node that is not the active controller, and they are hers; one renewed, a
    Java client authenticated with it produces and consumes across the three nodes as alice."""
    leader = int(metadata_quorum_status(secure.cluster.bootstrap,
                                        command_config=secure.secured.java_config("node"))["LeaderId"])
    follower = next(n for n in secure.cluster.nodes if n.node_id != leader)

    def tokens(*args: str) -> str:
        proc = subprocess.run([*kafka_tools_java(), "org.apache.kafka.tools.DelegationTokenCommand",
                               "--bootstrap-server", follower.bootstrap, "--command-config",
                               str(secure.secured.java_config("alice")), *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.stdout

    # The admin client sends each to a node of its choosing: of four tokens, some are asked for on a node that
    # forwards them (all four reaching the active controller directly has odds of 1 in 81).
    rows = []
    for _ in range(4):
        created = tokens("--create", "--max-life-time-period", "-1")
        rows.append(next(line.split() for line in created.splitlines() if "User:alice" in line))
    assert all(row[2:4] == ["User:alice", "User:alice"] for row in rows), rows
    token_id, hmac = rows[0][0], rows[0][1]
    assert "New expiry date" in tokens("--renew", "--hmac", hmac, "--renew-time-period", "600000")
    described = tokens("--describe", "--owner-principal", "User:alice")
    assert token_id in described, described
    config = tmp_path / "token.properties"
    write_properties(config, {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM_LOGIN} required username="{token_id}" password="{hmac}" tokenauth="true";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure.secured.pki.ca)})
    topic = PREFIX + "token"
    secure.create_topic(topic, partitions=3)
    readers = AclBinding(ResourceType.GROUP, "e2e-", ResourcePatternType.PREFIXED, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for future in secure.admin.create_acls([readers]).values():
        future.result(30)
    round_trip("java", secure.cluster.bootstrap, topic, 3, 300, "none", tmp_path, client_config=config)
