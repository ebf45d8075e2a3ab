"""fjord's HTTP listener on a three-node cluster: `/metrics` scraped during real clients' load and checked against
it (records in equal records produced; each replica's log holds what was produced; followers fetch what leaders
took in; under-replicated partitions rise while a follower is paused and fall when it resumes, an acks=all write
meanwhile waiting in purgatory; a fenced broker is counted by the others and knows it; rebalances of both group
protocols, transaction markers, cleaner passes, fsyncs per dir; a paused quorum leader counted as an election),
parsed by Prometheus' own Python parser in both exposition formats, linted by `promtool
check metrics`, and scraped by a real Prometheus server that answers PromQL about the cluster; `/health/live` and
`/health/ready` through a node's start-up, fencing and shutdown.

fjord's own endpoint (Kafka reports through JMX): skipped against Kafka.
"""

import json
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from harness import Cluster, FjordBroker, free_port, read_properties, wait_for, write_properties

pytestmark = pytest.mark.skipif(os.environ.get("E2E_BROKER", "fjord") != "fjord",
                                reason="fjord's HTTP endpoint: Kafka reports through JMX")

SESSION_MS = 6000
LAG_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("metrics"), controllers=3,
                extra={"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "1000",
                       "replica.lag.time.max.ms": str(LAG_MS), "log.cleaner.backoff.ms": "500"})
    c.start()
    yield c
    c.kill9()


def get(address: str, path: str, accept: str = "") -> Tuple[int, str, str]:
    """Status, content type and body of GET http://address/path."""
    request = urllib.request.Request(f"http://{address}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


Samples = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


def scrape(address: str) -> Samples:
    """Every sample of a node's `/metrics` (Prometheus' text format), by name and sorted labels."""
    status, content_type, body = get(address, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4"), (status, content_type)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def value(samples: Samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def cluster_total(cluster: Cluster, name: str, **labels) -> float:
    return sum(total(scrape(node.http), name, **labels) for node in cluster.nodes)


def produce(bootstrap: str, topic: str, count: int, size: int = 200) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        p.produce(topic, key=str(i).encode(), value=bytes(size))
    assert p.flush(30) == 0


def consume(bootstrap: str, topic: str, group: str, count: int, protocol: str = "classic") -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "group.protocol": protocol})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        message = c.poll(1)
        if message is not None and not message.error():
            got += 1
    c.commit(asynchronous=False)
    c.close()
    assert got == count


def create(bootstrap: str, topic: str, partitions: int = 3, min_isr: int = 1, replicas: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, replicas,
                                            config={"min.insync.replicas": str(min_isr)})])
    for f in futures.values():
        f.result(30)


def not_the_controller(cluster: Cluster):
    """A node that is not the active controller: pausing it changes no controller (whose election would hold up the
    leaders' ISR changes)."""
    return next(n for n in reversed(cluster.nodes) if value(scrape(n.http), "fjord_active_controller") == 0)


def test_metrics_count_what_the_clients_did(cluster):
    """Records and bytes produced are counted once, on the partitions' leaders; every replica's log then holds the
    bytes produced and the followers fetched them; requests and connections are counted; the cluster-wide gauges
    agree on every node; a group's lag is its partitions' high watermarks less its committed offsets."""
    topic, count = "counted", 3000
    create(cluster.bootstrap, topic)
    produce(cluster.bootstrap, topic, count)
    consume(cluster.bootstrap, topic, "counted-group", count)
    assert cluster_total(cluster, "fjord_topic_messages_in_total", topic=topic) == count
    bytes_in = cluster_total(cluster, "fjord_topic_in_bytes_total", topic=topic)
    assert bytes_in > count * 200
    # Three replicas of what came in: the leaders' logs and two followers' copies, byte for byte.
    wait_for(lambda: cluster_total(cluster, "fjord_log_size_bytes", topic=topic) == 3 * bytes_in,
             "every replica's log holds the bytes produced", 30)
    assert cluster_total(cluster, "fjord_replication_in_bytes_total") >= 2 * bytes_in
    assert cluster_total(cluster, "fjord_topic_out_bytes_total", topic=topic) >= bytes_in
    # Every record went out to the consumer at least once (a batch sent again counts again).
    assert cluster_total(cluster, "fjord_topic_messages_out_total", topic=topic) >= count
    ends = [scrape(n.http) for n in cluster.nodes]
    for partition in range(3):
        # Every replica ends at the same offset, and the partition's offsets sum to the records produced.
        assert len({value(s, "fjord_log_end_offset", topic=topic, partition=str(partition)) for s in ends}) == 1
    assert sum(value(ends[0], "fjord_log_end_offset", topic=topic, partition=str(p)) for p in range(3)) == count
    assert cluster_total(cluster, "fjord_requests_total", api="Produce") >= 1
    # Error codes by API, NONE included: every partition of the produce answers was NONE; a topic that does not
    # exist is answered UNKNOWN_TOPIC_OR_PARTITION.
    assert cluster_total(cluster, "fjord_request_errors_total", api="Produce", error="NONE") >= 3
    AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("no-such-topic", timeout=10)
    assert cluster_total(cluster, "fjord_request_errors_total", api="Metadata",
                         error="UNKNOWN_TOPIC_OR_PARTITION") >= 1
    assert cluster_total(cluster, "fjord_request_duration_seconds_count", api="Fetch") >= 1
    assert cluster_total(cluster, "fjord_connections_accepted_total") >= 3
    for samples in ends:
        assert value(samples, "fjord_global_topics") >= 1
        assert value(samples, "fjord_brokers", state="active") == 3
        assert value(samples, "fjord_offline_partitions") == 0
        assert total(samples, "fjord_build_info") == 1
        assert value(samples, "process_resident_memory_bytes") > 0
    assert sum(value(s, "fjord_active_controller") for s in ends) == 1
    assert sum(value(s, "fjord_leader_partitions") for s in ends) >= 3
    # The group's coordinator counts it, and its lag: none once it committed everything, then what came since.
    assert cluster_total(cluster, "fjord_groups", protocol="classic") >= 1
    wait_for(lambda: cluster_total(cluster, "fjord_consumer_group_total_lag", group="counted-group") == 0,
             "no lag after the group committed everything", 30)
    produce(cluster.bootstrap, topic, 100)
    wait_for(lambda: cluster_total(cluster, "fjord_consumer_group_total_lag", group="counted-group") == 100,
             "the group's lag is what was produced since its commit", 30)
    assert cluster_total(cluster, "fjord_consumer_group_lag", group="counted-group", topic=topic) == 100
    # A deleted topic's series go with it.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: cluster_total(cluster, "fjord_topic_messages_in_total", topic=topic) == 0
             and cluster_total(cluster, "fjord_log_size_bytes", topic=topic) == 0,
             "the deleted topic's series are gone", 30)


def test_under_replicated_partitions_follow_a_paused_follower(cluster):
    """A follower paused while records come in leaves its partitions' ISRs: their leaders count them under-replicated
    and the ISR shrinks; resumed, it catches up, the count falls back to zero and the ISR expands."""
    topic = "paused"
    create(cluster.bootstrap, topic, partitions=3)
    victim = not_the_controller(cluster)
    others = [n for n in cluster.nodes if n is not victim]
    bootstrap = ",".join(n.bootstrap for n in others)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def followed_partitions():
        """The partitions the paused node will only follow, once the nodes asked know every partition's leader
        (a node may learn of a new topic a moment after the one that created it)."""
        described = admin.list_topics(topic, timeout=10).topics[topic]
        partitions = list(described.partitions.values())
        if described.error is not None or len(partitions) != 3 or any(p.leader < 0 for p in partitions):
            return None
        return [p.id for p in partitions if p.leader != victim.node_id]

    # Records go to the partitions the paused node follows; those it leads wait for it.
    followed = wait_for(followed_partitions, "the new topic's leaders known to the other nodes", 30)
    shrinks = sum(total(scrape(n.http), "fjord_isr_shrinks_total") for n in others)
    expands = sum(total(scrape(n.http), "fjord_isr_expands_total") for n in others)
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        # An acks=all write waits in its leader's purgatory for the paused follower until the ISR drops it.
        waiting = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        waiting.produce(topic, value=b"w", partition=followed[0])
        waiting.poll(0)
        wait_for(lambda: sum(value(scrape(n.http), "fjord_delayed_operations", operation="produce") for n in others)
                 >= 1, "an acks=all produce counted waiting", LAG_MS / 1000)
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1})
        for partition in followed:
            p.produce(topic, value=b"x", partition=partition)
        assert p.flush(10) == 0
        assert waiting.flush(10) == 0
        wait_for(lambda: sum(total(scrape(n.http), "fjord_under_replicated_partitions") for n in others) > 0,
                 "the paused follower's partitions counted under-replicated", SESSION_MS / 1000)
        assert sum(total(scrape(n.http), "fjord_isr_shrinks_total") for n in others) > shrinks
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: sum(total(scrape(n.http), "fjord_under_replicated_partitions") for n in cluster.nodes) == 0,
             "no partition under-replicated once the follower caught up", 60)
    assert sum(total(scrape(n.http), "fjord_isr_expands_total") for n in cluster.nodes) > expands


def test_a_fenced_broker_is_counted_and_not_ready_until_back(cluster):
    """Paused past its session, a broker is fenced: the others count it; resumed, it is not ready until the
    controller answers it again, then ready once unfenced, and every node counts three active brokers."""
    victim = not_the_controller(cluster)
    others = [n for n in cluster.nodes if n is not victim]
    assert get(victim.http, "/health/ready")[0] == 200
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: all(value(scrape(n.http), "fjord_brokers", state="fenced") == 1 for n in others),
                 "the paused broker counted fenced", 3 * SESSION_MS / 1000)
        assert all(get(n.http, "/health/ready")[0] == 200 for n in others)
        # Asked while paused, it answers as it resumes: it knows it is fenced before the controller answers it again.
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(get, victim.http, "/health/ready")
            time.sleep(0.5)
            victim.proc.send_signal(signal.SIGCONT)
            status, _, body = asked.result(15)
        assert status == 503 and "fenced: no heartbeat answered" in body, (status, body)
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: get(victim.http, "/health/ready")[0] == 200, "the resumed broker ready again", 60)
    wait_for(lambda: all(value(scrape(n.http), "fjord_brokers", state="active") == 3 for n in cluster.nodes),
             "three active brokers", 60)


def test_the_work_behind_the_requests_is_counted(cluster):
    """A group's lag on partitions its coordinator does not host, rebalances of both group protocols, transaction
    markers by result, the log cleaner's passes and bytes, fsyncs
    per log dir and fetches waiting in purgatory, each counted on the node that did the work; the quorum's leader
    reports each member's metadata lag, and followers their lag behind their leaders."""
    bootstrap = cluster.bootstrap
    topic = "worked"
    create(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 10)
    for protocol in ("classic", "consumer"):
        before = cluster_total(cluster, "fjord_group_rebalances_total", protocol=protocol)
        consume(bootstrap, topic, f"worked-{protocol}", 10, protocol)
        assert cluster_total(cluster, "fjord_group_rebalances_total", protocol=protocol) >= before + 1, protocol

    # One replica per partition: the group's coordinator hosts one of the three at most, and asks the others'
    # leaders for their high watermarks when scraped.
    create(bootstrap, "worked-single", partitions=3, replicas=1)
    produce(bootstrap, "worked-single", 30)
    consume(bootstrap, "worked-single", "worked-single-group", 30)
    produce(bootstrap, "worked-single", 60)
    wait_for(lambda: cluster_total(cluster, "fjord_consumer_group_total_lag", group="worked-single-group") == 60,
             "the group's lag over partitions hosted elsewhere", 30)
    lagging = [labels for n in cluster.nodes for (name, labels) in scrape(n.http)
               if name == "fjord_consumer_group_lag" and ("group", "worked-single-group") in labels]
    assert len(lagging) == 3, lagging

    markers = {r: cluster_total(cluster, "fjord_txn_markers_written_total", result=r) for r in ("commit", "abort")}
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "worked-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    for partition in (0, 1):
        p.produce(topic, value=b"committed", partition=partition)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"aborted", partition=0)
    assert p.flush(30) == 0
    p.abort_transaction(30)
    # A marker for each partition of each transaction, on its leader (written once the transaction ended).
    for result, written in (("commit", 2), ("abort", 1)):
        wait_for(lambda: cluster_total(cluster, "fjord_txn_markers_written_total", result=result)
                 >= markers[result] + written, f"{written} {result} markers written", 30)

    # A compacted topic whose segments roll at every append after 100 ms: the first is soon cleanable.
    passes = cluster_total(cluster, "fjord_log_cleaner_passes_total")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("worked-compacted", 1, 3, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"})])["worked-compacted"] \
        .result(30)
    for _ in range(3):
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(200):
            p.produce("worked-compacted", key=str(i % 10).encode(), value=bytes(100))
        assert p.flush(30) == 0
        time.sleep(0.3)
    wait_for(lambda: cluster_total(cluster, "fjord_log_cleaner_passes_total") > passes, "a cleaning pass", 60)
    read = cluster_total(cluster, "fjord_log_cleaner_read_bytes_total")
    written = cluster_total(cluster, "fjord_log_cleaner_written_bytes_total")
    assert 0 < written < read, (read, written)
    assert cluster_total(cluster, "fjord_log_cleaner_pass_seconds_total") > 0

    for node in cluster.nodes:
        samples = scrape(node.http)
        assert total(samples, "fjord_log_dir_fsyncs_total") > 0
        assert value(samples, "fjord_log_cleaner_uncleanable_partitions") == 0
        # What each node follows, it follows closely on an idle cluster.
        assert total(samples, "fjord_replica_lag", topic=topic) == 0
        assert value(samples, "fjord_replica_max_lag") >= 0
    followed = sum(1 for n in cluster.nodes for (name, labels) in scrape(n.http)
                   if name == "fjord_replica_lag" and ("topic", topic) in labels)
    assert followed == 2 * 2, "each of the 2 partitions has 2 followers"
    # Followers' fetches wait at their leaders for new records.
    wait_for(lambda: cluster_total(cluster, "fjord_delayed_operations", operation="fetch") >= 1,
             "a follower's fetch counted waiting", 10)

    def quorum_lags():
        lags = [(labels, v) for n in cluster.nodes for (name, labels), v in scrape(n.http).items()
                if name == "fjord_metadata_replica_lag"]
        return lags if len(lags) == 3 and all(v == 0 for _, v in lags) else None
    wait_for(quorum_lags, "the quorum leader reports its 3 members caught up", 30)


def test_a_lost_quorum_leader_is_counted_as_an_election(cluster):
    """The metadata quorum's leader paused: the others elect another, and count the leader change and the time they
    went without a leader; resumed, every node is ready again."""
    leaders = {value(scrape(n.http), "fjord_metadata_leader") for n in cluster.nodes}
    assert len(leaders) == 1, leaders
    leader_id = int(leaders.pop())
    leader = next(n for n in cluster.nodes if n.node_id == leader_id)
    others = [n for n in cluster.nodes if n is not leader]
    before = {n.node_id: scrape(n.http) for n in others}
    leader.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: all(value(scrape(n.http), "fjord_metadata_elections_total")
                             > value(before[n.node_id], "fjord_metadata_elections_total") for n in others),
                 "the other nodes saw an election end", 15)
    finally:
        leader.proc.send_signal(signal.SIGCONT)
    for n in others:
        after = scrape(n.http)
        assert value(after, "fjord_metadata_leader_changes_total") > \
            value(before[n.node_id], "fjord_metadata_leader_changes_total")
        assert value(after, "fjord_metadata_election_seconds_total") > \
            value(before[n.node_id], "fjord_metadata_election_seconds_total")
        assert value(after, "fjord_metadata_leader") != leader.node_id
    wait_for(lambda: all(get(n.http, "/health/ready")[0] == 200 for n in cluster.nodes), "every node ready", 60)


def test_health_through_start_up_and_shutdown(tmp_path):
    """Live as soon as the HTTP listener is up; ready only once the broker serves; not ready, yet live, from the
    moment it is told to stop until it has stopped. With `log.format=json` every log line is a JSON object, and a
    request held up past `log.slow.request.ms` (the broker paused while producers keep it busy) is logged once with its
    API, client id, principal and time split."""
    broker = FjordBroker(tmp_path)
    props = read_properties(broker.config)
    props.update({"log.format": "json", "log.slow.request.ms": "100"})
    write_properties(broker.config, props)
    broker.starts += 1
    broker.spawn()
    seen: List[Tuple[int, int]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            try:
                seen.append((get(broker.http, "/health/live")[0], get(broker.http, "/health/ready")[0]))
            except (urllib.error.URLError, ConnectionError):
                seen.append((0, 0))
            if seen[-1] == (200, 200):
                break
            time.sleep(0.005)
        assert seen[-1] == (200, 200), seen[-10:]
        # Ready implies the Kafka listener serves.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "slow-one"})
        admin.list_topics(timeout=10)
        # Paused three times while a producer keeps requests in flight: some are held up past the threshold.
        create(broker.bootstrap, "slow", partitions=1, replicas=1)
        p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-one", "linger.ms": 5,
                      "queue.buffering.max.kbytes": 8192})
        deadline = time.monotonic() + 3
        pauses = 0
        while time.monotonic() < deadline:
            try:
                p.produce("slow", value=bytes(100_000))
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            if time.monotonic() > deadline - 3 + pauses + 0.5 and pauses < 3:
                broker.proc.send_signal(signal.SIGSTOP)
                time.sleep(0.3)
                broker.proc.send_signal(signal.SIGCONT)
                pauses += 1
        assert p.flush(60) == 0
        # A consumer's long polls keep the broker's shutdown going for a while (it finishes in-flight requests).
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 1000})
        c.assign([TopicPartition("slow", 0, 0)])
        while c.poll(1) is None:
            pass
        broker.proc.send_signal(signal.SIGTERM)
        stopping = []
        while broker.proc.poll() is None:
            try:
                stopping.append((get(broker.http, "/health/live")[0],) + get(broker.http, "/health/ready")[::2])
            except (urllib.error.URLError, ConnectionError):
                break
        assert broker.proc.wait(60) == 0
        c.close()
        # Live and not ready while it stops.
        assert (200, 503, '{"status":"not ready","reason":"shutting down"}\n') in stopping, stopping[-5:]
    finally:
        if broker.proc.poll() is None:
            broker.kill9()
    # Never ready before live.
    assert all(live == 200 for live, ready in seen if ready == 200)
    lines = [json.loads(line) for line in broker.log_path().read_text().splitlines() if line.strip()]
    assert any(line.get("message") == "started" for line in lines), lines[:5]
    slow = [line for line in lines if line.get("message") == "slow request"]
    assert slow, "no slow request logged"
    assert any(line["api"] == "Produce" and line["client_id"] == "slow-one" and line["principal"] == "User:ANONYMOUS"
               and float(line["total_ms"]) > 100 and "remote=" in line["phases_ms"] and line["partitions"] == 1
               for line in slow), slow
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        get(broker.http, "/health/live")


def test_both_formats_parse_and_promtool_finds_nothing_to_lint(cluster):
    """Prometheus' text format by default and OpenMetrics when asked, each read by Prometheus' own parser for it;
    `promtool check metrics` finds no problem; unknown paths and methods are refused."""
    node = cluster.nodes[0]
    status, content_type, text = get(node.http, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(text)}
    status, content_type, om = get(node.http, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and content_type.startswith("application/openmetrics-text"), content_type
    assert om.endswith("# EOF\n")
    om_names = {f.name for f in openmetrics_families(om)}
    for name in ("fjord_requests", "fjord_under_replicated_partitions", "fjord_active_controller",
                 "fjord_request_duration_seconds", "process_cpu_seconds"):
        assert name in names and name in om_names, name
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0 and lint.stdout.strip() == "" and lint.stderr.strip() == "", lint.stdout + lint.stderr
    assert get(node.http, "/nothing")[0] == 404
    request = urllib.request.Request(f"http://{node.http}/metrics", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405


def test_prometheus_scrapes_the_cluster_and_answers_promql(cluster, tmp_path):
    """Debian's Prometheus server scrapes the three nodes every second; PromQL over what it stored sees every
    target up, one active controller, and the records a producer sent; every query of the Grafana dashboard in
    `dashboards/` is valid PromQL and names only series the nodes serve."""
    topic, count = "scraped", 500
    create(cluster.bootstrap, topic, partitions=2)
    produce(cluster.bootstrap, topic, count)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    targets = ", ".join(f'"{n.http}"' for n in cluster.nodes)
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      f"scrape_configs:\n  - job_name: fjord\n    static_configs:\n      - targets: [{targets}]\n")
    check = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(tmp_path / "prometheus.log", "wb")
    server = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)

    def ask(promql: str) -> dict:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            return json.loads(error.read())
        except (urllib.error.URLError, ConnectionError):
            return {}

    def query(promql: str) -> List[dict]:
        answer = ask(promql)
        return answer["data"]["result"] if answer.get("status") == "success" else []

    def scalar(promql: str) -> float:
        result = query(promql)
        return float(result[0]["value"][1]) if result else -1.0

    try:
        wait_for(lambda: scalar('count(up{job="fjord"} == 1)') == 3, "Prometheus sees the three nodes up", 60)
        wait_for(lambda: scalar("sum(fjord_active_controller)") == 1, "one active controller", 30)
        wait_for(lambda: scalar(f'sum(fjord_topic_messages_in_total{{topic="{topic}"}})') == count,
                 "the records produced, summed over the leaders", 30)
        assert scalar("max(fjord_global_partitions)") >= 2
        assert scalar('sum by (api) (fjord_requests_total{api="Produce"})') >= 1
        dashboard = json.loads((Path(__file__).parents[2] / "dashboards" / "grafana-fjord.json").read_text())
        # Every series a node declares (a family with no sample yet, e.g. lag before any group, included).
        served = set()
        for node in cluster.nodes:
            for line in get(node.http, "/metrics")[2].splitlines():
                if line.startswith("# TYPE "):
                    name = line.split()[2]
                    served |= {name} | {name + suffix for suffix in ("_total", "_bucket", "_sum", "_count")}
        exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
        assert len(exprs) >= 16
        for expr in exprs:
            answer = ask(expr)
            assert answer.get("status") == "success", (expr, answer)
            for name in re.findall(r"\b((?:fjord|process)_[a-z_]+)", expr):
                assert name in served, (expr, name)
    finally:
        server.terminate()
        server.wait(30)
        log.close()
