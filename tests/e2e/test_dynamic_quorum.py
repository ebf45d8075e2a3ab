"""A dynamic metadata quorum (KIP-853): controllers named by `controller.quorum.bootstrap.servers` instead of
`controller.quorum.voters`. fjord needs no format step: node 1 (the first bootstrap server) begins the quorum alone,
the others join it; Kafka is formatted `--standalone` / `--no-initial-controllers` for the same start. Voters join
by `controller.quorum.auto.join.enable` or by `kafka-metadata-quorum add-controller`, and leave by
`remove-controller`."""

import re
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness import Cluster, free_port, kafka_tool, round_trip

QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


def replication(bootstrap_controller: str) -> dict:
    """Node id → (directory id, status: Leader, Follower or Observer), from `kafka-metadata-quorum
    --bootstrap-controller ... describe --replication`."""
    out = kafka_tool(QUORUM_TOOL, "--bootstrap-controller", bootstrap_controller, "describe", "--replication")
    nodes = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 7 and f[0].isdigit() and f[-1] in ("Leader", "Follower", "Observer"):
            nodes[int(f[0])] = (f[1], f[-1])
    return nodes


def wait_for(bootstrap_controller: str, want, what: str, deadline_s: float = 90) -> dict:
    """Polls `replication` until `want(nodes)` holds."""
    end = time.monotonic() + deadline_s
    nodes = None
    while True:
        try:
            nodes = replication(bootstrap_controller)
            if want(nodes):
                return nodes
        except AssertionError:
            pass  # no leader reachable at the moment
        assert time.monotonic() < end, f"never {what}: {nodes}"
        time.sleep(1)


def voters(nodes: dict) -> set:
    return {n for n, (_, status) in nodes.items() if status in ("Leader", "Follower")}


def create(bootstrap: str, topic: str, replication_factor: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, replication_factor)])[topic].result(60)


def test_controllers_found_through_bootstrap_servers_join_as_voters_and_outlive_the_first_leader(tmp_path):
    """With auto-join, the three controllers end up voters of one quorum; the leader killed (-9), the other two elect
    one of themselves and topics are still created; restarted, the node is a voter again."""
    cluster = Cluster(tmp_path, dynamic=True, extra={"controller.quorum.auto.join.enable": "true"})
    try:
        cluster.start()
        nodes = wait_for(cluster.bootstrap_controllers, lambda n: voters(n) == {1, 2, 3}, "three voters")
        # A dynamic quorum runs at kraft.version 1, as brokers and controllers report it.
        for flag, bootstrap in (("--bootstrap-server", cluster.bootstrap),
                                ("--bootstrap-controller", cluster.bootstrap_controllers)):
            features = kafka_tool("org.apache.kafka.tools.FeatureCommand", flag, bootstrap, "describe")
            assert re.search(r"Feature: kraft.version\s.*FinalizedVersionLevel: 1\s", features), features
        create(cluster.bootstrap, "dyn-before", 3)
        leader = next(n for n, (_, status) in nodes.items() if status == "Leader")
        cluster.node(leader).kill9()
        survivors = [n for n in cluster.nodes if n.node_id != leader]
        survivor_controllers = ",".join(
            cluster.bootstrap_controllers.split(",")[n.node_id - 1] for n in survivors)
        wait_for(survivor_controllers,
                 lambda n: any(s == "Leader" and i != leader for i, (_, s) in n.items()), "a new leader")
        create(",".join(n.bootstrap for n in survivors), "dyn-after", 2)
        cluster.node(leader).starts += 1
        cluster.node(leader).spawn()
        cluster.node(leader).wait_ready(120)
        wait_for(survivor_controllers, lambda n: voters(n) == {1, 2, 3}, "three voters again")
    finally:
        cluster.kill9()


def test_kafka_metadata_quorum_adds_and_removes_a_controller(tmp_path):
    """Without auto-join, node 2 stays an observer until `add-controller` (run with its own properties, as Kafka's
    tool is) makes it a voter; `remove-controller` with its directory id makes it an observer again. A static
    quorum's answer is Kafka's too: adding a voter is refused."""
    cluster = Cluster(tmp_path, dynamic=True)
    try:
        cluster.start()
        first = cluster.bootstrap_controllers.split(",")[0]
        nodes = wait_for(first, lambda n: voters(n) == {1} and {2, 3} <= set(n), "node 1 alone with two observers")
        assert nodes[2][1] == "Observer" and nodes[3][1] == "Observer", nodes

        kafka_tool(QUORUM_TOOL, "--bootstrap-controller", first, "--command-config", str(cluster.node(2).config),
                   "add-controller")
        nodes = wait_for(first, lambda n: voters(n) == {1, 2}, "node 2 a voter")
        directory_id = nodes[2][0]
        create(cluster.bootstrap, "dyn-two-voters", 3)

        kafka_tool(QUORUM_TOOL, "--bootstrap-controller", first, "remove-controller", "--controller-id", "2",
                   "--controller-directory-id", directory_id)
        wait_for(first, lambda n: voters(n) == {1} and n.get(2, ("", ""))[1] == "Observer", "node 2 an observer")
        create(cluster.bootstrap, "dyn-one-voter", 3)
    finally:
        cluster.kill9()


def test_brokers_learn_a_dynamic_quorums_cluster_from_its_controllers(tmp_path):
    """Two controllers and two broker-only nodes that name only the bootstrap servers: the brokers learn the cluster
    id from the controllers, register, follow the metadata log as observers, and host a topic at replication
    factor 2 that is read back."""
    # Kafka (and fjord) refuse auto-join on a node without the controller role.
    auto_join = {"controller.quorum.auto.join.enable": "true"}
    cluster = Cluster(tmp_path, controllers=2, brokers=2, dynamic=True, node_extra={1: auto_join, 2: auto_join})
    try:
        cluster.start()
        nodes = wait_for(cluster.bootstrap_controllers, lambda n: voters(n) == {1, 2} and {3, 4} <= set(n),
                         "two voters and two observers")
        assert nodes[3][1] == "Observer" and nodes[4][1] == "Observer", nodes
        create(cluster.bootstrap, "dyn-brokers", 2)
        round_trip("confluent", cluster.bootstrap, "dyn-brokers", 3, 300, "none", tmp_path)
    finally:
        cluster.kill9()


@pytest.mark.parametrize("quorum", ["static", "dynamic"])
def test_a_broker_restarted_on_another_port_follows_the_metadata_log_again(tmp_path, quorum):
    """A broker-only node stops and comes back listening on another port: the metadata log reaches it there (it
    registers the new listener), it serves again, and a topic with a replica on it is written and read back."""
    cluster = Cluster(tmp_path, controllers=1, brokers=2, dynamic=quorum == "dynamic")
    try:
        cluster.start()
        moved = cluster.node(3)
        moved.stop()
        old = moved.bootstrap
        moved.port = free_port()
        moved.bootstrap = f"127.0.0.1:{moved.port}"
        moved.config.write_text(moved.config.read_text().replace(old, moved.bootstrap))
        moved.start(120)
        bootstrap = ",".join(n.bootstrap for n in cluster.brokers)
        create(bootstrap, f"moved-{quorum}", 2)
        round_trip("confluent", bootstrap, f"moved-{quorum}", 3, 300, "none", tmp_path)
    finally:
        cluster.kill9()
