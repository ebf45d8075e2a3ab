"""fjord's web console in a real browser: Debian's Chromium, headless, driven by Playwright. On a prepared
three-node cluster each page loads and shows what Kafka's own clients and tools say about the cluster (brokers with
racks, the quorum's leader, topics with partitions, messages, retention and configs, a group's members and lag);
the message browser finds records by offset and by timestamp and shows them as text, JSON and hex; an offset
reset made in the console is what `kafka-consumer-groups --describe` then shows. On a cluster with ACLs the
console asks for a log-in and a principal sees only its own topics. Screenshots of every page are saved under
target/console-screenshots/.

fjord's own console (Kafka has none): skipped against Kafka.
"""

import http.client
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from harness import (Cluster, Secured, kafka_tool, metadata_quorum_status, read_properties, wait_for,
                     write_properties)

pytestmark = pytest.mark.skipif(os.environ.get("E2E_BROKER", "fjord") != "fjord",
                                reason="fjord's web console: Kafka has none")

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "target" / "console-screenshots"
TOPIC = "orders"
PARTITIONS = 3
RECORDS = 60
BASE_TS = (int(time.time()) - 3600) * 1000
GROUP = "billing"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("console"), controllers=3, extra={"console.read.only": "false"},
                node_extra={i: {"broker.rack": f"rack-{'abc'[i - 1]}"} for i in (1, 2, 3)})
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        # `charts` is led by node 1, whose traffic its overview charts.
        topics = [NewTopic(TOPIC, PARTITIONS, 3, config={"retention.ms": "7200000"}),
                  NewTopic("charts", num_partitions=1, replica_assignment=[[1, 2, 3]])]
        for future in admin.create_topics(topics).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0})
        for i in range(RECORDS):
            producer.produce(TOPIC, key=f"order-{i}", value=json.dumps({"id": i, "item": "kettle"}),
                             partition=i % PARTITIONS, timestamp=BASE_TS + i * 1000, headers=[("source", b"e2e")])
        assert producer.flush(30) == 0
        yield c
    finally:
        # Also when the preparation fails: no node outlives the module.
        c.kill9()


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    # The secured cluster's console is served over TLS by a certificate of the tests' own CA.
    context = browser.new_context(viewport={"width": 1280, "height": 800}, ignore_https_errors=True)
    pg = context.new_page()
    errors: List[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # Refusals the tests provoke (a wrong password, a denied topic, a reset of a group with members) are logged by
    # the browser as failed loads; anything else is a defect.
    refused = re.compile(r"Failed to load resource: the server responded with a status of (401|403|409)")
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" and not refused.search(m.text) else None)
    pg.set_default_timeout(20000)
    yield pg
    context.close()
    assert not errors, f"the page logged errors: {errors}"


def shot(pg, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def rows(pg, table: str) -> List[List[str]]:
    """The cells of `table`'s body rows, as text."""
    return pg.eval_on_selector_all(f"#{table} tbody tr",
                                   "trs => trs.map(tr => Array.from(tr.cells, td => td.innerText.trim()))")


def open_page(pg, node, fragment: str, wait: str):
    pg.goto(f"http://{node.http}/console/#{fragment}")
    pg.wait_for_selector(wait)


def test_the_overview_shows_brokers_racks_the_controller_and_the_quorum(cluster, page):
    node = cluster.nodes[0]
    # Traffic in and out for the charts while the page watches.
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "charts-reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["charts"])
    open_page(page, node, "/", "#brokers tbody tr")
    try:
        for _ in range(8):
            for i in range(200):
                producer.produce("charts", value=b"x" * 512)
            assert producer.flush(10) == 0
            end = time.monotonic() + 1
            while time.monotonic() < end:
                consumer.poll(0.1)
    finally:
        consumer.close()
    brokers = rows(page, "brokers")
    assert [(r[0], r[2]) for r in brokers] == [("1", "rack-a"), ("2", "rack-b"), ("3", "rack-c")], brokers
    # Each broker's listeners as it advertises them (DescribeConfigs answered by the broker itself).
    assert all(n.bootstrap in r[1] and "://" in r[1] for n, r in zip(cluster.nodes, brokers)), brokers
    assert all(re.search(r"free of", r[6]) for r in brokers), brokers
    assert page.inner_text("#health") == "healthy"
    assert page.inner_text("#broker-count") == "3"
    status = metadata_quorum_status(cluster.bootstrap)
    assert page.inner_text("#quorum-leader") == status["LeaderId"], status
    # The active controller is the quorum's leader, badged in its broker's row.
    assert [r[0] for r in brokers if "controller" in r[3]] == [status["LeaderId"]], brokers
    charted = page.eval_on_selector_all(".chart .muted", "spans => spans.map(s => s.innerText)")
    assert page.eval_on_selector_all(".chart polyline", "ls => ls.map(l => l.points.numberOfItems)")[0] >= 3
    # Bytes in and out were charted at some point: each line rose above its floor.
    assert all(page.eval_on_selector_all(".chart polyline",
                                         "ls => ls.map(l => Array.from(l.points).some(p => p.y < 80))")), charted
    shot(page, "overview")


def test_the_topic_list_and_a_topics_partitions_and_configs(cluster, page):
    node = cluster.nodes[1]
    open_page(page, node, "/topics", "#topics tbody tr")
    listed = {r[0]: r for r in rows(page, "topics")}
    assert TOPIC in listed, listed
    name, partitions, replicas, under, messages, size, retention, cleanup = listed[TOPIC]
    assert (partitions, replicas, under, messages, retention, cleanup) == ("3", "3", "0", "60", "2 h", "delete")
    page.fill("#topic-filter", "ord")
    assert [r[0] for r in rows(page, "topics")] == [TOPIC]
    shot(page, "topics")

    page.click(f"#topics a:text('{TOPIC}')")
    page.wait_for_selector("#partitions tbody tr")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    described = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    shown = rows(page, "partitions")
    assert len(shown) == PARTITIONS
    for p, leader, replicas_cell, isr, start, end, _ in shown:
        meta = described[int(p)]
        assert int(leader) == meta.leader
        assert sorted(map(int, replicas_cell.split(", "))) == sorted(meta.replicas)
        assert sorted(map(int, isr.split(", "))) == sorted(meta.isrs)
        assert (start, end) == ("0", "20")
    shot(page, "topic-partitions")

    page.click("#tab-configs")
    page.wait_for_selector("#configs tbody tr")
    configs = {r[0]: r for r in rows(page, "configs")}
    assert configs["retention.ms"][1:] == ["7200000", "DYNAMIC_TOPIC_CONFIG"]
    assert configs["cleanup.policy"][1:] == ["delete", "DEFAULT_CONFIG"]
    shot(page, "topic-configs")


def read_messages(pg, **fields: str) -> List[List[str]]:
    for name, value in fields.items():
        selector = f"#msg-{name}"
        if pg.eval_on_selector(selector, "e => e.tagName") == "SELECT":
            pg.select_option(selector, value)
        else:
            pg.fill(selector, value)
    pg.click("#msg-read")
    pg.wait_for_selector("#records, #messages .error")
    return rows(pg, "records")


def test_the_message_browser_finds_records_by_offset_and_by_timestamp(cluster, page):
    open_page(page, cluster.nodes[2], f"/topic/{TOPIC}/messages", "#msg-read")
    # Partition 1 holds records 1, 4, 7, …: offset 5 is record 16.
    found = read_messages(page, partition="1", **{"from": "offset"}, offset="5", limit="3")
    assert [(r[0], r[1], r[3]) for r in found] == [("1", "5", "order-16"), ("1", "6", "order-19"),
                                                  ("1", "7", "order-22")], found
    assert json.loads(found[0][4]) == {"id": 16, "item": "kettle"}
    assert found[0][5] == "source: e2e"

    # Across partitions from a time: record 40 is the first at or after it.
    at = BASE_TS + 40_000
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at / 1000)) + ".000Z"
    found = read_messages(page, partition="all", **{"from": "timestamp"}, timestamp=iso, limit="50")
    assert [r[3] for r in found] == [f"order-{i}" for i in range(40, RECORDS)], found
    assert found[0][2] == iso
    shot(page, "messages")

    page.select_option("#msg-format", "hex")
    assert rows(page, "records")[0][4].startswith("7b 22 69 64 22")  # {"id"
    page.select_option("#msg-format", "json")
    assert '\n  "id": 40' in rows(page, "records")[0][4]
    page.fill("#msg-search", "order-41")
    assert [r[3] for r in rows(page, "records")] == ["order-41"]
    assert page.inner_text("#msg-count") == "1 of 20 records"

    # The last records before the end.
    found = read_messages(page, search="", partition="0", **{"from": "end"}, limit="2")
    assert [r[1] for r in found] == ["18", "19"], found


def describe_group(cluster) -> Dict[int, str]:
    """CURRENT-OFFSET by partition of `kafka-consumer-groups --describe` (Kafka's own tool)."""
    out = kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                     cluster.bootstrap, "--describe", "--group", GROUP)
    offsets = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[1] == TOPIC:
            offsets[int(cells[2])] = cells[3]
    return offsets


def test_a_groups_lag_and_an_offset_reset_from_the_console(cluster, page):
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "client.id": "billing-app",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    wait_for(lambda: consumer.poll(0.5) is not None and len(consumer.assignment()) == PARTITIONS,
             "the consumer to join and read", 60)
    consumer.commit(offsets=[TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)], asynchronous=False)
    node = cluster.nodes[0]
    try:
        open_page(page, node, "/groups", "#groups tbody tr")
        listed = {r[0]: r for r in rows(page, "groups")}
        assert listed[GROUP][3:] == ["1", "45"], listed
        page.click(f"#groups a:text('{GROUP}')")
        page.wait_for_selector("#offsets tbody tr")
        assert page.inner_text("#group-state") == "Stable"
        members = rows(page, "members")
        assert len(members) == 1 and members[0][1] == "billing-app", members
        assert sorted(members[0][3].split(", ")) == [f"{TOPIC}-{p}" for p in range(PARTITIONS)]
        offsets = rows(page, "offsets")
        assert [(r[1], r[2], r[3], r[4], r[5]) for r in offsets] == [
            (str(p), "5", "20", "15", "billing-app") for p in range(PARTITIONS)], offsets
        assert page.inner_text("#total-lag") == "45"
        shot(page, "group")
        # With a member in the group the coordinator refuses, as it refuses kafka-consumer-groups.
        page.click("#reset")
        page.wait_for_selector("#reset-status .error")
    finally:
        consumer.close()

    wait_for(lambda: describe_state(page, node) == "Empty", "the group to empty", 60)
    page.select_option("#reset-to", "timestamp")
    page.fill("#reset-timestamp", str(BASE_TS + 30_000))
    page.click("#reset")
    # Records 30, 31, 32 open the time: offset 10 in each partition.
    wait_for(lambda: [r[2] for r in rows(page, "offsets")] == ["10"] * PARTITIONS, "the reset to show", 20)
    assert describe_group(cluster) == {p: "10" for p in range(PARTITIONS)}

    page.select_option("#reset-to", "earliest")
    page.click("#reset")
    wait_for(lambda: [r[2] for r in rows(page, "offsets")] == ["0"] * PARTITIONS, "the reset to show", 20)
    assert describe_group(cluster) == {p: "0" for p in range(PARTITIONS)}
    assert page.inner_text("#total-lag") == "60"


def describe_state(pg, node) -> str:
    """The group's state on a fresh load of its page."""
    pg.goto(f"http://{node.http}/console/#/group/{GROUP}")
    pg.reload()
    pg.wait_for_selector("#group-state")
    return pg.inner_text("#group-state")


def test_the_quorum_page_names_the_leader_and_every_voter(cluster, page):
    open_page(page, cluster.nodes[1], "/quorum", "#voters tbody tr")
    status = metadata_quorum_status(cluster.bootstrap)
    assert page.inner_text("#quorum-leader") == status["LeaderId"]
    voters = [r[0].split()[0] for r in rows(page, "voters")]
    assert sorted(voters) == ["1", "2", "3"]
    shot(page, "quorum")


# ---- a cluster with ACLs ----

@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("console-acl")
    s = Secured(workdir)
    extra = {**s.node_props(), "listener.name.broker.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
             "listener.name.broker.scram-sha-512.sasl.jaas.config":
                 "org.apache.kafka.common.security.scram.ScramLoginModule required;"}
    c = Cluster(workdir, controllers=1, extra=extra, broker_listener="BROKER")
    # Its HTTP listener serves TLS, with the node's certificate from the `ssl.*` keys.
    node = c.nodes[0]
    props = read_properties(node.config)
    props["http.listeners"] = f"https://{node.http}"
    write_properties(node.config, props)
    c.start()
    try:
        yield from prepared_with_acls(c, s)
    finally:
        c.kill9()


def prepared_with_acls(c, s):
    """The secured cluster's topics, ACLs and SCRAM user; yields the cluster and its settings."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **s.librdkafka("node")})
    carol = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"carol-pw")
    for future in admin.alter_user_scram_credentials([carol]).values():
        future.result(30)
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("alice-orders", "payroll")]).values():
        future.result(30)
    allow = [AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                        AclPermissionType.ALLOW) for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    for future in admin.create_acls(allow).values():
        future.result(30)
    yield c, s


def log_in(pg, node, user: str, password: str, mechanism: str = "PLAIN") -> None:
    pg.goto(f"https://{node.http}/console/#/topics")
    pg.wait_for_selector("#login-form")
    pg.select_option("#login-form select[name=mechanism]", mechanism)
    pg.fill("#login-form input[name=username]", user)
    pg.fill("#login-form input[name=password]", password)
    pg.click("#login-form button")


def test_on_a_cluster_with_acls_a_principal_sees_only_its_topics(secured, page):
    cluster, s = secured
    node = cluster.nodes[0]
    log_in(page, node, "alice", "wrong")
    page.wait_for_selector("#login-form .error")
    assert "log-in failed" in page.inner_text("#login-form .error")

    log_in(page, node, "alice", s.USERS["alice"])
    page.wait_for_selector("#topics tbody tr")
    assert page.inner_text("#user") == "alice"
    assert [r[0] for r in rows(page, "topics")] == ["alice-orders"]
    shot(page, "acl-alice-topics")
    page.goto(f"https://{node.http}/console/#/topic/payroll")
    page.wait_for_selector("[role=alert]")
    assert "TOPIC_AUTHORIZATION_FAILED" in page.inner_text("[role=alert]")
    # ACLs and users need DESCRIBE on the cluster.
    page.goto(f"https://{node.http}/console/#/security")
    page.wait_for_selector("h1:text('Security')")
    alerts = page.eval_on_selector_all("[role=alert]", "es => es.map(e => e.innerText)")
    assert [a.split(":")[0] for a in alerts] == ["DescribeAcls", "DescribeUserScramCredentials"], alerts
    assert all("CLUSTER_AUTHORIZATION_FAILED (31)" in a for a in alerts), alerts

    page.click("#who button")
    page.wait_for_selector("#login-form")
    log_in(page, node, "node", s.USERS["node"])
    page.wait_for_selector("#topics tbody tr")
    assert {r[0] for r in rows(page, "topics")} >= {"alice-orders", "payroll"}
    page.goto(f"https://{node.http}/console/#/security")
    page.wait_for_selector("#acls tbody tr")
    assert sorted(rows(page, "acls")) == [
        ["User:alice", "*", op, "ALLOW", "TOPIC", "alice-", "PREFIXED"] for op in ("DESCRIBE", "READ")]
    assert rows(page, "users") == [["carol", "SCRAM-SHA-512 (8,192 iterations)"]]
    shot(page, "security")


def test_a_scram_user_logs_in_to_the_console(secured, page):
    cluster, _ = secured
    log_in(page, cluster.nodes[0], "carol", "carol-pw", mechanism="SCRAM-SHA-512")
    page.wait_for_selector("#user")
    assert page.inner_text("#user") == "carol"
    # carol has no ACLs: the topics exist, but she is shown none of them.
    page.wait_for_selector("#topics")
    assert rows(page, "topics") == []


def test_the_http_listener_serves_tls_and_the_session_cookie_keeps_to_it(secured, page):
    cluster, s = secured
    node = cluster.nodes[0]
    trusting = ssl.create_default_context(cafile=str(s.pki.ca))
    with urllib.request.urlopen(f"https://{node.http}/health/live", context=trusting, timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(f"https://{node.http}/metrics", context=trusting, timeout=10) as response:
        assert b"fjord_build_info{" in response.read()
    # Plain HTTP is not answered on a TLS address.
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        urllib.request.urlopen(f"http://{node.http}/health/live", timeout=10)
    log_in(page, node, "alice", s.USERS["alice"])
    page.wait_for_selector("#user")
    cookie, = [c for c in page.context.cookies() if c["name"] == "fjord_console"]
    assert (cookie["secure"], cookie["httpOnly"], cookie["sameSite"]) == (True, True, "Strict"), cookie
