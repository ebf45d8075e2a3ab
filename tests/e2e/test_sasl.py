"""SASL listeners: every client authenticates with SASL/PLAIN, over plaintext (SASL_PLAINTEXT) and over TLS
(SASL_SSL), and with SCRAM-SHA-256 as a user added with `kafka-configs`, and produces and consumes (and, as a SCRAM
user, commits a transaction); a wrong password, an unknown user or a mechanism the listener does not enable
fails within seconds with the error the client normally reports, while the broker serves everyone else.

One broker for the module (fjord, or Kafka with E2E_BROKER=kafka): its own links on PLAINTEXT, and two SASL listeners
configured with Kafka's keys: `sasl.enabled.mechanisms=PLAIN` and, per listener, the JAAS text naming the users
(`listener.name.<listener>.plain.sasl.jaas.config`); SASL_SSL's keystore is PEM. Sessions on SASL_PLAINTEXT last
SESSION_MS (`listener.name.sasl.plain.connections.max.reauth.ms`, KIP-368): its clients authenticate again on their
connections as they go.
"""

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

import pytest
from confluent_kafka import KafkaError as ConfluentError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer
from kafka.errors import KafkaError

from harness import (FULL_MATRIX, Pki, create_topics, franz_go_dir, free_port, fresh_seed, kafka_tool, make_broker,
                     read_properties, read_until_quiet, round_trip, run_tool, wait_for, write_properties)
from test_tls import all_refused_quickly

CLIENTS = ["java", "confluent", "go", "kafka-python"]
USERS = {"alice": "alice-secret", "admin": "admin-secret"}
AUTHENTICATION_FAILED = ConfluentError._AUTHENTICATION
SESSION_MS = 3000
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The SCRAM user the module's broker is given once it is up (both mechanisms, on SASL_PLAINTEXT).
SCRAM_USER, SCRAM_PASSWORD = "scrammy", "scrammy-secret"
SCRAM_MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


class SaslBroker:
    def __init__(self, workdir: Path):
        self.pki = Pki(workdir)
        self.pki.issue("broker", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
        # The SCRAM user exists from the start: fjord server's --add-scram, kafka-storage format's.
        self.broker = make_broker(workdir / "broker", add_scram=[
            f"{m}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]" for m in SCRAM_MECHANISMS])
        props = read_properties(self.broker.config)
        self.ports = {"SASL": free_port(), "SASLTLS": free_port()}
        added = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        props["listeners"] += "," + added
        props["advertised.listeners"] += "," + added
        props["listener.security.protocol.map"] = (props.get("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")
                                                   + ",SASL:SASL_PLAINTEXT,SASLTLS:SASL_SSL")
        props["inter.broker.listener.name"] = "PLAINTEXT"
        props["sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl.sasl.enabled.mechanisms"] = "PLAIN," + ",".join(SCRAM_MECHANISMS) + ",OAUTHBEARER"
        # Kafka's default validation of OAUTHBEARER tokens: unsecured (unsigned) JWS.
        props["listener.name.sasl.oauthbearer.sasl.jaas.config"] = (
            f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="admin";')
        for mechanism in SCRAM_MECHANISMS:
            props[f"listener.name.sasl.{mechanism.lower()}.sasl.jaas.config"] = f"{SCRAM_MODULE} required;"
        users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
        for listener in self.ports:
            props[f"listener.name.{listener.lower()}.plain.sasl.jaas.config"] = f"{PLAIN_MODULE} required {users};"
        props["listener.name.sasl.plain.connections.max.reauth.ms"] = str(SESSION_MS)
        props.update({
            "listener.name.sasltls.ssl.keystore.type": "PEM",
            "listener.name.sasltls.ssl.keystore.location": str(workdir / "broker.pem"),
        })
        write_properties(self.broker.config, props)
        self.broker.start()
        # fjord adds --add-scram's users once its broker serves: wait until they are there.
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})

        def credentials() -> int:
            try:
                described = admin.describe_user_scram_credentials([SCRAM_USER])[SCRAM_USER].result(10)
                return len(described.scram_credential_infos)
            except KafkaException:
                return 0
        wait_for(lambda: credentials() == len(SCRAM_MECHANISMS), "the --add-scram user's credentials", 30)

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_config(self, client: str, workdir: Path, listener: str, user: str = "alice",
                      password: Optional[str] = None, mechanism: str = "PLAIN",
                      extra: Optional[Dict[str, str]] = None) -> Path:
        """The properties file `client` reaches `listener` with, as `user` (with `password`, else the user's own)."""
        known = {**USERS, SCRAM_USER: SCRAM_PASSWORD}
        password = known.get(user, "none") if password is None else password
        protocol = "SASL_SSL" if listener == "SASLTLS" else "SASL_PLAINTEXT"
        if client == "java":
            module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
            props = {"security.protocol": protocol, "sasl.mechanism": mechanism,
                     "sasl.jaas.config": f'{module} required username="{user}" password="{password}";'}
            if protocol == "SASL_SSL":
                props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca)})
        elif client == "kafka-python":
            props = {"security_protocol": protocol, "sasl_mechanism": mechanism, "sasl_plain_username": user,
                     "sasl_plain_password": password}
            if protocol == "SASL_SSL":
                props["ssl_cafile"] = str(self.pki.ca)
        else:
            # librdkafka's naming, which the franz-go tool reads too.
            key = "sasl.mechanisms" if client == "confluent" else "sasl.mechanism"
            props = {"security.protocol": protocol, key: mechanism, "sasl.username": user,
                     "sasl.password": password}
            if protocol == "SASL_SSL":
                props["ssl.ca.location"] = str(self.pki.ca)
        props.update(extra or {})
        path = workdir / f"{client}-{listener}-{user}-{password}-{mechanism}.properties"
        write_properties(path, props)
        return path


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    s = SaslBroker(tmp_path_factory.mktemp("sasl"))
    yield s
    if s.broker.running():
        s.broker.stop()


# Every client by both SCRAM mechanisms; in the test command, SCRAM-SHA-512 by two of them (E2E_FULL_MATRIX=1: all).
SCRAM_MATRIX = [(c, m) for m in SCRAM_MECHANISMS for c in CLIENTS
                if FULL_MATRIX or m == "SCRAM-SHA-256" or c in ("go", "kafka-python")]


@pytest.mark.parametrize("client,mechanism", SCRAM_MATRIX, ids=[f"{c}-{m}" for c, m in SCRAM_MATRIX])
def test_round_trip_as_a_scram_user(sasl: SaslBroker, client: str, mechanism: str, tmp_path: Path):
    """Authenticated by SCRAM as a user `kafka-configs` added, produce with acks=all and consume back."""
    topic = f"scram-{client}-{mechanism}".lower()
    create_topics(sasl.broker.bootstrap, [topic], partitions=2, replication_factor=1)
    config = sasl.client_config(client, tmp_path, "SASL", SCRAM_USER, mechanism=mechanism)
    round_trip(client, sasl.bootstrap("SASL"), topic, 2, 300, "lz4", tmp_path, client_config=config)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_transaction_as_a_scram_user(sasl: SaslBroker, client: str, tmp_path: Path):
    """Authenticated by SCRAM-SHA-512, a transactional producer (InitProducerId, AddPartitionsToTxn, EndTxn through
    the transaction coordinator) commits its records, which a read_committed consumer then reads."""
    topic = f"scram-txn-{client}"
    create_topics(sasl.broker.bootstrap, [topic], partitions=2, replication_factor=1)
    config = sasl.client_config(client, tmp_path, "SASL", SCRAM_USER, mechanism="SCRAM-SHA-512")
    run_tool(client, "produce", bootstrap=sasl.bootstrap("SASL"), topic=topic, count=200, codec="none", acks="all",
             seed=fresh_seed(), out=tmp_path / "txn.out", client_config=config, transactional_id=f"txn-{client}")
    committed = read_until_quiet(sasl.broker.bootstrap, topic, 2, 200, "read_committed", wait_s=30, quiet_s=1)
    assert len(committed) == 200


@pytest.mark.parametrize("listener", ["SASL", "SASLTLS"])
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip_as_a_plain_user(sasl: SaslBroker, client: str, listener: str, tmp_path: Path):
    """Authenticated with SASL/PLAIN, produce with acks=all and consume back, over plaintext and over TLS."""
    topic = f"sasl-{client}-{listener}".lower()
    create_topics(sasl.broker.bootstrap, [topic], partitions=2, replication_factor=1)
    config = sasl.client_config(client, tmp_path, listener)
    round_trip(client, sasl.bootstrap(listener), topic, 2, 300, "zstd", tmp_path, client_config=config)


BAD_LOGINS = [("alice", "wrong", "PLAIN"), ("mallory", "x", "PLAIN"), ("alice", None, "SCRAM-SHA-512"),
              (SCRAM_USER, "wrong", "SCRAM-SHA-256"), ("mallory", "x", "SCRAM-SHA-256")]


@pytest.mark.parametrize("user,password,mechanism", BAD_LOGINS, ids=["wrong-password", "unknown-user",
                                                                     "mechanism-not-enabled", "scram-wrong-password",
                                                                     "scram-unknown-user"])
def test_a_bad_login_is_refused_within_seconds(sasl: SaslBroker, user: str, password: Optional[str],
                                                mechanism: str, tmp_path: Path):
    """librdkafka, kafka-python, Java and franz-go fail to authenticate, reporting it as they normally do; a client
    with the right password is served afterwards."""
    # SASL_SSL enables PLAIN only: the refused mechanism is asked for there.
    listener = "SASLTLS" if (user, password, mechanism) == ("alice", None, "SCRAM-SHA-512") else "SASL"
    bootstrap = sasl.bootstrap(listener)

    def config(client: str, extra: Optional[Dict[str, str]] = None) -> Path:
        return sasl.client_config(client, tmp_path, listener, user, password, mechanism, extra)

    def confluent():
        errors = []
        conf = {"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "socket.timeout.ms": 5000,
                "error_cb": errors.append, **read_properties(config("confluent"))}
        producer = Producer(conf)
        producer.produce("sasl-refused", b"v")
        producer.flush(20)
        # librdkafka reports the refusal to the error callback; the record then times out.
        refusals = [e for e in errors if e.code() == AUTHENTICATION_FAILED]
        if refusals:
            raise KafkaException(refusals[0])

    def kafka_python():
        producer = KafkaProducer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=5000, max_block_ms=5000,
                                 **read_properties(config("kafka-python")))
        try:
            producer.send("sasl-refused", b"v").get(timeout=10)
        finally:
            producer.close(timeout=1)

    def java():
        extra = {"default.api.timeout.ms": "5000", "request.timeout.ms": "3000"}
        run_tool("java", "create-topic", bootstrap=bootstrap, topic="sasl-refused", partitions=1,
                 client_config=config("java", extra), wall_s=60)

    def franz_go():
        run_tool("go", "create-topic", bootstrap=bootstrap, topic="sasl-refused", partitions=1,
                 client_config=config("go"), wall_s=60)

    failure, python_failure, _, _ = all_refused_quickly(confluent, kafka_python, java, franz_go)
    assert failure.args[0].code() == AUTHENTICATION_FAILED, failure
    assert isinstance(python_failure, KafkaError), python_failure
    # Everyone else is still served.
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         **read_properties(sasl.client_config("confluent", tmp_path, listener))})
    assert admin.list_topics(timeout=10).topics is not None


def test_sessions_are_renewed_on_their_connections(sasl: SaslBroker, tmp_path: Path):
    """librdkafka and kafka-python producers that keep their connections past several session lifetimes authenticate
    again on them as they go: every record is delivered, and no error is reported."""
    bootstrap = sasl.bootstrap("SASL")
    topic = "sasl-sessions"
    create_topics(sasl.broker.bootstrap, [topic], partitions=1, replication_factor=1)
    errors, delivered = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append,
                         **read_properties(sasl.client_config("confluent", tmp_path, "SASL"))})
    python_producer = KafkaProducer(bootstrap_servers=bootstrap,
                                    **read_properties(sasl.client_config("kafka-python", tmp_path, "SASL")))
    deadline = time.monotonic() + 3 * SESSION_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(10)
        python_producer.send(topic, f"p{sent}".encode()).get(timeout=10)
        sent += 1
        time.sleep(0.25)
    python_producer.close(timeout=5)
    assert errors == []
    assert delivered == [None] * sent


def configs(bootstrap: str, *args: str) -> str:
    return kafka_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "users", *args)


def test_scram_credentials_are_kept_by_the_cluster(sasl: SaslBroker):
    """`kafka-configs --entity-type users` adds SCRAM credentials (the controller derives and stores the keys) and
    deletes them, and is refused a user altered twice in one request; DescribeUserScramCredentials (librdkafka's
    admin client) gives their mechanisms and iterations. (`kafka-configs --describe --entity-type users` also asks for
    the users' client quotas, which fjord does not serve yet.)"""
    bootstrap = sasl.broker.bootstrap
    configs(bootstrap, "--alter", "--entity-name", "carol", "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=carol-secret]")
    configs(bootstrap, "--alter", "--entity-name", "carol", "--add-config", "SCRAM-SHA-512=[password=carol-secret]")
    configs(bootstrap, "--alter", "--entity-name", "dave", "--add-config", "SCRAM-SHA-512=[password=dave-secret]")
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def iterations(user: str) -> Dict[str, int]:
        try:
            described = admin.describe_user_scram_credentials([user])[user].result(10)
        except KafkaException as e:
            assert e.args[0].code() == ConfluentError.RESOURCE_NOT_FOUND, e
            return {}
        return {str(info.mechanism).rsplit(".", 1)[-1]: info.iterations for info in described.scram_credential_infos}

    wait_for(lambda: iterations("carol") == {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 4096},
             lambda: f"carol's credentials: {iterations('carol')}")
    everyone = wait_for(lambda: (found := admin.describe_user_scram_credentials().result(10)) and len(found) >= 2
                        and found, "not every user described")
    assert {"carol", "dave"} <= set(everyone), everyone
    assert iterations("nobody") == {}
    # Both mechanisms of one user in one request: one alteration per user per request.
    with pytest.raises(AssertionError) as refused:
        configs(bootstrap, "--alter", "--entity-name", "erin", "--add-config",
                "SCRAM-SHA-256=[password=e],SCRAM-SHA-512=[password=e]")
    assert "DuplicateResource" in str(refused.value) or "twice" in str(refused.value), refused.value
    configs(bootstrap, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-256")
    wait_for(lambda: iterations("carol") == {"SCRAM_SHA_512": 4096}, "SCRAM-SHA-256 of carol not deleted")


def test_franz_gos_own_scram_and_oauth_tests(sasl: SaslBroker, tmp_path: Path):
    """franz-go's TestSCRAMAuth, TestSCRAMAuthBadCredentials and TestOAuthAuth (an unsecured JWS accepted, an
    expired one refused with SASL_AUTHENTICATION_FAILED and invalid_token), pointed at the SASL_PLAINTEXT listener:
    all run (not skipped) and pass."""
    env = dict(os.environ, KGO_SEEDS=sasl.broker.bootstrap, KGO_TEST_SCRAM_SEEDS=sasl.bootstrap("SASL"),
               KGO_TEST_SCRAM=f"{SCRAM_USER}:{SCRAM_PASSWORD}:256", KGO_TEST_OAUTH_SEEDS=sasl.bootstrap("SASL"))
    proc = subprocess.run(["go", "test", "./pkg/kgo", "-count=1", "-timeout", "120s", "-v", "-run",
                           "^(TestSCRAMAuth|TestSCRAMAuthBadCredentials|TestOAuthAuth)$"],
                          cwd=franz_go_dir(), env=env, capture_output=True, text=True, timeout=600)
    out = tmp_path / "go-test.out"
    out.write_text(proc.stdout + proc.stderr)
    results = dict((m.group(2), m.group(1))
                   for m in re.finditer(r"^\s*--- (PASS|FAIL|SKIP): (\S+)", proc.stdout, re.M))
    assert results == {"TestSCRAMAuth": "PASS", "TestSCRAMAuthBadCredentials": "PASS", "TestOAuthAuth": "PASS"}, (
        results, str(out))
    assert proc.returncode == 0, str(out)


def test_round_trip_with_an_unsecured_oauthbearer_token(sasl: SaslBroker, tmp_path: Path):
    """librdkafka's own unsecured JWT (`enable.sasl.oauthbearer.unsecure.jwt`) authenticates over OAUTHBEARER and
    produces and consumes (franz-go's TestOAuthAuth, above, has an expired token refused)."""
    conf = {"bootstrap.servers": sasl.bootstrap("SASL"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=admin"}
    topic = "oauth-" + str(int(time.time() * 1000))
    create_topics(sasl.broker.bootstrap, [topic], 1, 1)
    p = Producer(conf)
    delivered = []
    for i in range(10):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    p.flush(30)
    assert delivered == [None] * 10
    from confluent_kafka import Consumer
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < 10 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))
