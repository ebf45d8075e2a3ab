"""Client telemetry (KIP-714): client-metrics subscriptions made, listed, described and deleted with Kafka's own
`kafka-client-metrics` and `kafka-configs --entity-type client-metrics`, refused as Kafka refuses them; and —
beyond Kafka, which hands pushed metrics to a plugin — what Java kafka-clients and librdkafka push shown on the
broker's `/metrics`, labelled with their client id and principal, its values checked against the load.

The subscription tools run against Kafka too; Kafka advertises the push APIs only with a telemetry plugin, so the
push tests are fjord's alone.
"""

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from harness import Cluster, create_topics, kafka_tools_java, run_tool, wait_for, write_properties

FJORD = os.environ.get("E2E_BROKER", "fjord") == "fjord"
COMMAND = "org.apache.kafka.tools.ClientMetricsCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
TOPIC = "telemetry"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("telemetry"), controllers=1)
    c.start()
    create_topics(c.bootstrap, [TOPIC], 1, 1)
    yield c
    c.kill9()


def tool(main: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*kafka_tools_java(), main, *args], capture_output=True, text=True, timeout=120)


def client_metrics(cluster, *args: str) -> str:
    proc = tool(COMMAND, "--bootstrap-server", cluster.bootstrap, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_subscriptions_are_made_listed_described_and_deleted_with_kafkas_tools(cluster):
    client_metrics(cluster, "--alter", "--name", "tools-sub", "--metrics",
                   "org.apache.kafka.producer.,org.apache.kafka.consumer.coordinator.", "--interval", "2000",
                   "--match", "client_id=tool-.*,client_software_name=apache-kafka-java")
    assert "tools-sub" in client_metrics(cluster, "--list").split()
    described = client_metrics(cluster, "--describe", "--name", "tools-sub")
    assert "interval.ms=2000" in described, described
    assert "metrics=org.apache.kafka.producer.,org.apache.kafka.consumer.coordinator." in described, described
    assert "match=client_id=tool-.*,client_software_name=apache-kafka-java" in described, described
    # kafka-configs sees the same resource and changes it.
    proc = tool(CONFIGS, "--bootstrap-server", cluster.bootstrap, "--alter", "--entity-type", "client-metrics",
                "--entity-name", "tools-sub", "--add-config", "interval.ms=3000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = tool(CONFIGS, "--bootstrap-server", cluster.bootstrap, "--describe", "--entity-type", "client-metrics",
                "--entity-name", "tools-sub")
    assert "interval.ms=3000" in proc.stdout, proc.stdout + proc.stderr
    client_metrics(cluster, "--delete", "--name", "tools-sub")
    assert "tools-sub" not in client_metrics(cluster, "--list").split()


@pytest.mark.parametrize("args, error", [
    (["--interval", "50"], "InvalidRequestException"),
    (["--match", "client_colour=red"], "InvalidConfigurationException"),
    (["--match", "client_id=("], "InvalidConfigurationException"),
])
def test_a_bad_subscription_is_refused_as_kafka_refuses_it(cluster, args, error):
    proc = tool(COMMAND, "--bootstrap-server", cluster.bootstrap, "--alter", "--name", "bad-sub", *args)
    assert proc.returncode != 0
    assert error in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "bad-sub" not in client_metrics(cluster, "--list").split()


Samples = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


def scrape(cluster) -> Samples:
    samples: Samples = {}
    for node in cluster.nodes:
        with urllib.request.urlopen(f"http://{node.http}/metrics", timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def series_of(samples: Samples, client_id: str) -> Dict[str, List[Tuple[Dict[str, str], float]]]:
    out: Dict[str, List[Tuple[Dict[str, str], float]]] = {}
    for (name, labels), value in samples.items():
        labels = dict(labels)
        if labels.get("client_id") == client_id:
            out.setdefault(name, []).append((labels, value))
    return out


@pytest.mark.skipif(not FJORD, reason="Kafka hands pushed metrics to a plugin only")
def test_what_java_and_librdkafka_clients_push_is_on_the_brokers_metrics(cluster, tmp_path: Path):
    client_metrics(cluster, "--alter", "--name", "producers", "--metrics", "org.apache.kafka.producer.",
                   "--interval", "1000", "--match", "client_id=telemetry-.*")
    try:
        # Java: pushes deltas of its counters at its interval; held open after its last record, its pushes add up
        # to what it sent.
        config = tmp_path / "java.properties"
        write_properties(config, {"client.id": "telemetry-java"})
        run_tool("java", "produce", bootstrap=cluster.bootstrap, topic=TOPIC, count=5000, seed=1, acks="all",
                 codec="none", out=str(tmp_path / "acks.txt"), client_config=str(config), hold_ms=3500)
        java = series_of(scrape(cluster), "telemetry-java")
        sent = java.get("fjord_client_producer_record_send_total")
        assert sent and sum(v for _, v in sent) == 5000, sorted(java)
        labels = sent[0][0]
        assert labels["principal"] == "User:ANONYMOUS" and len(labels["client_instance_id"]) == 22, labels
        # Only what the subscription asks for: producer metrics.
        assert all(name.startswith("fjord_client_producer_") for name in java), sorted(java)

        # librdkafka: pushes while it runs, and as it is destroyed.
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": "telemetry-rdkafka"})
        end = time.monotonic() + 4
        while time.monotonic() < end:
            producer.produce(TOPIC, b"x" * 100)
            producer.poll(0.05)
        assert producer.flush(10) == 0
        del producer
        rdkafka = wait_for(lambda: series_of(scrape(cluster), "telemetry-rdkafka") or None,
                           "librdkafka's metrics", 30)
        assert any(name.startswith("fjord_client_producer_") for name in rdkafka), sorted(rdkafka)
        # A client the subscription does not match pushes nothing.
        other = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": "untracked"})
        other.produce(TOPIC, b"y")
        assert other.flush(10) == 0
        time.sleep(2)
        del other
        assert not series_of(scrape(cluster), "untracked")
        assert scrape(cluster)[("fjord_client_telemetry_pushes_total", ())] >= 2
    finally:
        client_metrics(cluster, "--delete", "--name", "producers")
