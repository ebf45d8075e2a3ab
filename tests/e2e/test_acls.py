"""Authorization with Kafka's StandardAuthorizer semantics: `authorizer.class.name` set to Kafka's class, ACLs added,
listed and removed with `kafka-acls` and the admin API, and a matrix of what a principal without the ACL Kafka requires
is refused (with Kafka's error) and what it may do once given it — produce, consume in a group, metadata, topic
administration, configs, transactions, idempotent producers, ACL administration — with prefixed, wildcard, deny and
host ACLs and a super user.

One broker for the module (fjord, or Kafka with E2E_BROKER=kafka): a SASL_PLAINTEXT listener with PLAIN users `admin`
(a super user) and the test's principals, and SCRAM-SHA-256 for the delegation tokens they create; its own links on PLAINTEXT, whose anonymous principal is a super user too (a
Kafka broker reaches its controller there). Each test works on its own topics, groups and ids, so the ACLs the tests
add do not meet.
"""

import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ConfigResource, NewTopic, ResourcePatternType, ResourceType)

from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient,
                         ResourcePatternFilter, ResourceType as KafkaResourceType)
from kafka.errors import ClusterAuthorizationFailedError

from acl_matrix import AUTHORIZATION_ERRORS, CASES, Case, Names, error_codes
from test_tls import all_refused_quickly
from harness import (Pki, free_port, kafka_tool, kafka_tools_java, make_broker, read_properties, round_trip, run_tool,
                     write_properties)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The matrix's cases each act as their own user.
USERS = ["admin", "alice", "bob", "carol", "dave", "erin", "frank", "grace"] + [f"m-{c.api.lower()}" for c in CASES]


class AclBroker:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.broker = make_broker(workdir / "broker")
        props = read_properties(self.broker.config)
        self.port = free_port()
        added = f"SASL://127.0.0.1:{self.port}"
        # MTLS: client certificates required, their names mapped to principals.
        self.pki = Pki(workdir)
        self.pki.issue("broker", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
        self.pki.issue("writer", "/OU=apps/CN=writer")
        self.pki.issue("stranger", "/O=other/CN=stranger")
        self.tls_port = free_port()
        added += f",MTLS://127.0.0.1:{self.tls_port}"
        props["listeners"] += "," + added
        props["advertised.listeners"] += "," + added
        props["listener.security.protocol.map"] = (props.get("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")
                                                   + ",SASL:SASL_PLAINTEXT,MTLS:SSL")
        props.update({
            "listener.name.mtls.ssl.keystore.type": "PEM",
            "listener.name.mtls.ssl.keystore.location": str(workdir / "broker.pem"),
            "listener.name.mtls.ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.truststore.location": str(self.pki.ca),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=apps$/$1/,DEFAULT",
        })
        props["inter.broker.listener.name"] = "PLAINTEXT"
        props["sasl.enabled.mechanisms"] = "PLAIN"
        users = " ".join(f'user_{u}="{u}-secret"' for u in USERS)
        props["listener.name.sasl.plain.sasl.jaas.config"] = f"{PLAIN_MODULE} required {users};"
        # Delegation tokens, which authenticate by SCRAM.
        props["listener.name.sasl.sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256"
        props["listener.name.sasl.scram-sha-256.sasl.jaas.config"] = f"{SCRAM_MODULE} required;"
        props["delegation.token.secret.key"] = "e2e-token-secret"
        props["authorizer.class.name"] = STANDARD_AUTHORIZER
        props["super.users"] = "User:admin;User:ANONYMOUS"
        write_properties(self.broker.config, props)
        self.broker.start()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.admin = self.admin_client("admin")
        self.matrix_topics = self.matrix_names()

    def matrix_names(self):
        """Each matrix case's resources; its topic created, with its id."""
        names = {c.api: f"m-{c.api.lower()}" for c in CASES}
        for future in self.admin.create_topics([NewTopic(t, 1, 1) for t in names.values()]).values():
            future.result(30)
        ids = {t.name: t.topic_id for t in self.admin.describe_topics(
            TopicCollection(list(names.values()))).values() for t in [t.result(30)]}
        as_uuid = lambda u: uuid.UUID(int=((u.get_most_significant_bits() % 2**64) << 64)
                                      | (u.get_least_significant_bits() % 2**64))
        return {api: Names(topic=t, topic_id=as_uuid(ids[t]), group=t + "-group", txn=t + "-txn")
                for api, t in names.items()}

    def kafka_python(self, user: str) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap, security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=f"{user}-secret")

    def conf(self, user: str, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                "sasl.username": user, "sasl.password": f"{user}-secret", **extra}

    def tls_conf(self, name: str) -> dict:
        """A client on the MTLS listener with the certificate issued as `name`."""
        return {"bootstrap.servers": f"127.0.0.1:{self.tls_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(self.pki.ca), "ssl.certificate.location": str(self.pki.dir / f"{name}.crt"),
                "ssl.key.location": str(self.pki.dir / f"{name}.key")}

    def admin_client(self, user: str) -> AdminClient:
        return AdminClient(self.conf(user))

    def allow(self, principal: str, resource: ResourceType, name: str, operation: AclOperation,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*",
              permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
        binding = AclBinding(resource, name, pattern, principal, host, operation, permission)
        for future in self.admin.create_acls([binding]).values():
            future.result(30)
        # The ACL is committed before the answer; every request after it is judged by it.

    def topic(self, name: str, partitions: int = 1) -> str:
        for future in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)
        return name

    def command_config(self, user: str) -> Path:
        path = self.workdir / f"{user}.properties"
        write_properties(path, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                "sasl.jaas.config": f'{PLAIN_MODULE} required username="{user}" '
                                                    f'password="{user}-secret";'})
        return path


@pytest.fixture(scope="module")
def acls(tmp_path_factory):
    b = AclBroker(tmp_path_factory.mktemp("acls"))
    yield b
    if b.broker.running():
        b.broker.stop()


def produce_error(conf: dict, topic: str, timeout_s: float = 20):
    """The error of producing one record to `topic` with `conf` (None once it is acknowledged)."""
    outcome = []
    p = Producer({**conf, "message.timeout.ms": int(timeout_s * 1000) - 2000})
    p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(timeout_s)
    assert outcome, "no delivery report"
    return outcome[0]


def consume_error(conf: dict, topic: str, group: str, want: int = 1, timeout_s: float = 20):
    """The first error consuming `topic` in `group` reports, or None once `want` records came."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = 0
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return m.error().code()
            got += 1
            if got >= want:
                return None
    finally:
        c.close()
    raise AssertionError(f"neither {want} records nor an error within {timeout_s}s")


def admin_error(future) -> int:
    """The Kafka error code an admin future fails with (0 when it succeeds)."""
    try:
        future.result(30)
        return 0
    except KafkaException as e:
        return e.args[0].code()


def test_kafka_acls_tool_adds_lists_and_removes_acls(acls):
    config = str(acls.command_config("admin"))
    common = ["--bootstrap-server", acls.bootstrap, "--command-config", config]
    kafka_tool("org.apache.kafka.tools.AclCommand", *common, "--add", "--allow-principal", "User:alice",
               "--operation", "Read", "--operation", "Describe", "--topic", "tool-orders", "--group", "tool-")
    listed = kafka_tool("org.apache.kafka.tools.AclCommand", *common, "--list", "--topic", "tool-orders")
    assert "User:alice" in listed and "READ" in listed and "DESCRIBE" in listed, listed
    prefixed = kafka_tool("org.apache.kafka.tools.AclCommand", *common, "--add", "--allow-principal", "User:bob",
                          "--operation", "Write", "--topic", "tool-", "--resource-pattern-type", "prefixed")
    assert "PREFIXED" in prefixed, prefixed
    kafka_tool("org.apache.kafka.tools.AclCommand", *common, "--remove", "--force", "--topic", "tool-orders")
    everything = kafka_tool("org.apache.kafka.tools.AclCommand", *common, "--list")
    assert "tool-orders" not in everything, everything
    assert "User:bob" in everything and "tool-" in everything, everything


def test_acl_administration_needs_alter_and_describe_on_the_cluster(acls):
    # librdkafka's describe_acls answers a refusal with no ACLs (with Kafka too); kafka-python reports it.
    listing = KafkaAdminClient(bootstrap_servers=acls.bootstrap, security_protocol="SASL_PLAINTEXT",
                               sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret")
    everything = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(KafkaResourceType.ANY, None,
                                                                  ACLResourcePatternType.ANY))
    with pytest.raises(ClusterAuthorizationFailedError):
        listing.describe_acls(everything)
    listing.close()
    alice = acls.admin_client("alice")
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    for future in alice.create_acls([binding]).values():
        assert admin_error(future) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The admin sees what it made; the filter names what it matches.
    acls.allow("User:alice", ResourceType.TOPIC, "admin-x", AclOperation.READ)
    listed = acls.admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "admin-x", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(30)
    assert [(b.name, b.principal, b.operation) for b in listed] == [("admin-x", "User:alice", AclOperation.READ)]
    # DeleteAcls returns what it removed.
    removed = acls.admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "admin-x", ResourcePatternType.LITERAL, "User:alice", None, AclOperation.ANY,
        AclPermissionType.ANY)])
    (future,) = removed.values()
    assert [b.name for b in future.result(30)] == ["admin-x"]


def test_produce_needs_write_on_the_topic(acls):
    topic = acls.topic("orders-" + uuid.uuid4().hex[:6])
    alice = acls.conf("alice")
    assert produce_error(alice, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.allow("User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce_error(alice, topic) is None


def test_consume_needs_read_on_the_topic_and_on_the_group(acls):
    topic = acls.topic("reads-" + uuid.uuid4().hex[:6])
    assert produce_error(acls.conf("admin"), topic) is None
    bob = acls.conf("bob")
    group = "bob-group-" + uuid.uuid4().hex[:6]
    # The group is checked first (FindCoordinator), then the topic.
    assert consume_error(bob, topic, group) == KafkaError.GROUP_AUTHORIZATION_FAILED
    acls.allow("User:bob", ResourceType.GROUP, "bob-group-", AclOperation.READ, ResourcePatternType.PREFIXED)
    assert consume_error(bob, topic, group) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.allow("User:bob", ResourceType.TOPIC, topic, AclOperation.READ)
    assert consume_error(bob, topic, group) is None


def test_metadata_shows_only_the_topics_a_principal_may_describe(acls):
    seen = acls.topic("seen-" + uuid.uuid4().hex[:6])
    hidden = acls.topic("hidden-" + uuid.uuid4().hex[:6])
    acls.allow("User:carol", ResourceType.TOPIC, seen, AclOperation.DESCRIBE)
    topics = acls.admin_client("carol").list_topics(timeout=30).topics
    assert seen in topics and hidden not in topics, sorted(topics)
    assert hidden in acls.admin.list_topics(timeout=30).topics


def test_topic_administration_needs_create_delete_and_configs_acls(acls):
    dave = acls.admin_client("dave")
    name = "dave-" + uuid.uuid4().hex[:6]
    (future,) = dave.create_topics([NewTopic(name, 1, 1)]).values()
    assert admin_error(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.allow("User:dave", ResourceType.TOPIC, "dave-", AclOperation.CREATE, ResourcePatternType.PREFIXED)
    (future,) = dave.create_topics([NewTopic(name, 1, 1)]).values()
    assert admin_error(future) == 0
    (future,) = dave.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)]).values()
    assert admin_error(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.allow("User:dave", ResourceType.TOPIC, name, AclOperation.ALTER_CONFIGS)
    (future,) = dave.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)]).values()
    assert "retention.ms" in future.result(30)
    (future,) = dave.delete_topics([name]).values()
    assert admin_error(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.allow("User:dave", ResourceType.TOPIC, name, AclOperation.DELETE)
    (future,) = dave.delete_topics([name]).values()
    assert admin_error(future) == 0


def test_a_deny_overrides_allows_and_hosts_are_matched(acls):
    prefix = "erin-" + uuid.uuid4().hex[:6]
    secret, open_topic, elsewhere = (acls.topic(f"{prefix}-{t}") for t in ("secret", "open", "elsewhere"))
    acls.allow("User:erin", ResourceType.TOPIC, prefix, AclOperation.ALL, ResourcePatternType.PREFIXED)
    acls.allow("User:erin", ResourceType.GROUP, "*", AclOperation.READ)
    acls.allow("User:erin", ResourceType.TOPIC, secret, AclOperation.READ, permission=AclPermissionType.DENY)
    acls.allow("User:*", ResourceType.TOPIC, elsewhere, AclOperation.WRITE, host="10.1.2.3",
               permission=AclPermissionType.DENY)
    erin = acls.conf("erin")
    for topic in (secret, open_topic):
        assert produce_error(erin, topic) is None
    assert consume_error(erin, open_topic, prefix + "-g1") is None
    assert consume_error(erin, secret, prefix + "-g2") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A DENY from another host does not apply to this one.
    assert produce_error(erin, elsewhere) is None
    acls.allow("User:*", ResourceType.TOPIC, elsewhere, AclOperation.WRITE, host="127.0.0.1",
               permission=AclPermissionType.DENY)
    assert produce_error(erin, elsewhere).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_transactions_need_write_on_their_transactional_id(acls):
    topic = acls.topic("txn-" + uuid.uuid4().hex[:6])
    txn_id = "frank-txn-" + uuid.uuid4().hex[:6]
    acls.allow("User:frank", ResourceType.TOPIC, topic, AclOperation.WRITE)
    frank = acls.conf("frank", **{"transactional.id": txn_id})
    p = Producer(frank)
    with pytest.raises(KafkaException) as refused:
        p.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acls.allow("User:frank", ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    p = Producer(frank)
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"in a transaction")
    p.commit_transaction(20)


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(acls):
    topic = acls.topic("idem-" + uuid.uuid4().hex[:6])
    grace = acls.conf("grace", **{"enable.idempotence": True})
    err = produce_error(grace, topic)
    assert err is not None and err.code() in (KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                              KafkaError.TOPIC_AUTHORIZATION_FAILED), err
    acls.allow("User:grace", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce_error(grace, topic) is None


def test_super_users_pass_every_check(acls):
    topic = acls.topic("super-" + uuid.uuid4().hex[:6])
    acls.allow("User:*", ResourceType.TOPIC, topic, AclOperation.ALL, permission=AclPermissionType.DENY)
    assert produce_error(acls.conf("admin"), topic) is None
    assert produce_error(acls.conf("alice"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def resource_name(names: Names, which: str) -> str:
    return {"topic": names.topic, "topic-new": names.topic + "-new", "group": names.group, "txn": names.txn,
            "cluster": "kafka-cluster"}[which]


@pytest.mark.parametrize("case", CASES, ids=[c.api for c in CASES])
def test_every_api_needs_the_acls_kafka_requires(acls, case: Case):
    """The raw request of each API (kafka-python's protocol classes): refused with Kafka's error without the ACLs
    Kafka requires, and not refused for authorization once they are given."""
    user = f"m-{case.api.lower()}"
    names = acls.matrix_topics[case.api]
    client = acls.kafka_python(user)
    try:
        refused = error_codes(client._manager.run(client._manager.send, case.build(names)))
        assert case.denied in refused, f"{case.api}: {refused}"
        for kind, which, operation in case.grants:
            acls.allow(f"User:{user}", ResourceType(kind), resource_name(names, which), AclOperation(operation))
        # Kafka's brokers take the new ACLs from the metadata log a moment after CreateAcls is answered; fjord's
        # answer waits for them.
        deadline = time.time() + 15
        while True:
            allowed = error_codes(client._manager.run(client._manager.send, case.build(names)))
            if not set(allowed) & AUTHORIZATION_ERRORS or time.time() > deadline:
                break
            time.sleep(0.2)
        assert not set(allowed) & AUTHORIZATION_ERRORS, f"{case.api}: {allowed}"
    finally:
        client.close()


def test_a_client_certificate_names_its_principal(acls):
    """On an SSL listener the principal is the client certificate's name as Java writes it (RFC 2253, the last
    RDN first), through `ssl.principal.mapping.rules`: a rule maps CN=writer,OU=apps to User:writer, and DEFAULT
    keeps the whole name of another."""
    topic = acls.topic("certs-" + uuid.uuid4().hex[:6])
    for name, principal in (("writer", "User:writer"), ("stranger", "User:CN=stranger,O=other")):
        conf = acls.tls_conf(name)
        assert produce_error(conf, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        acls.allow(principal, ResourceType.TOPIC, topic, AclOperation.WRITE)
        deadline = time.time() + 15
        while (err := produce_error(conf, topic)) is not None and time.time() < deadline:
            time.sleep(0.5)
        assert err is None, f"{principal}: {err}"


def tokens_tool(acls, command_config: Path, *args: str) -> subprocess.CompletedProcess:
    """`kafka-delegation-tokens` (Kafka's own tool) on the SASL listener as `command_config` says."""
    return subprocess.run([*kafka_tools_java(), "org.apache.kafka.tools.DelegationTokenCommand", "--bootstrap-server",
                           acls.bootstrap, "--command-config", str(command_config), *args],
                          capture_output=True, text=True, timeout=120)


def token_config(acls, name: str, token_id: str, hmac: str, client: str) -> Path:
    """The properties `client` (java, or go) authenticates with the delegation token `token_id` in."""
    if client == "java":
        props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                 "sasl.jaas.config": f'{SCRAM_MODULE} required username="{token_id}" password="{hmac}" '
                                     'tokenauth="true";'}
    else:
        props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": token_id,
                 "sasl.password": hmac, "e2e.scram.tokenauth": "true"}
    path = acls.workdir / f"{name}-{client}.properties"
    write_properties(path, props)
    return path


def described_tokens(out: str) -> Dict[str, dict]:
    """kafka-delegation-tokens' table (--create, --describe) by token id: hmac, owner, requester, renewers."""
    tokens = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0] != "TOKENID" and fields[2].startswith("User:"):
            tokens[fields[0]] = {"hmac": fields[1], "owner": fields[2], "requester": fields[3],
                                 "renewers": fields[4]}
    return tokens


def test_a_delegation_token_authenticates_as_its_owner_until_expired(acls, tmp_path: Path):
    """alice creates a token naming bob its renewer; Java and franz-go clients authenticated with it act as alice (her
    ACLs let them produce and consume); bob renews it, carol may not; it cannot be used to ask for more tokens;
    describing shows it to alice and bob, to carol only once she has DESCRIBE_TOKENS on alice; once alice expires it,
    it authenticates no one."""
    alice, bob, carol = (acls.command_config(u) for u in ("alice", "bob", "carol"))
    created = tokens_tool(acls, alice, "--create", "--renewer-principal", "User:bob", "--max-life-time-period", "-1")
    assert created.returncode == 0, created.stderr[-2000:]
    tokens = described_tokens(created.stdout)
    assert len(tokens) == 1, created.stdout
    (token_id, token), = tokens.items()
    assert (token["owner"], token["requester"], token["renewers"]) == ("User:alice", "User:alice", "[User:bob]"), token
    for operation in (AclOperation.WRITE, AclOperation.READ):
        acls.allow("User:alice", ResourceType.TOPIC, "token-", operation, ResourcePatternType.PREFIXED)
    acls.allow("User:alice", ResourceType.GROUP, "e2e-", AclOperation.READ, ResourcePatternType.PREFIXED)
    for client in ("java", "go"):
        topic = acls.topic(f"token-{client}")
        config = token_config(acls, "alice-token", token_id, token["hmac"], client)
        round_trip(client, acls.bootstrap, topic, 1, 50, "none", tmp_path, client_config=config)
    # Not on a connection the token authenticated, nor on one nobody authenticated (PLAINTEXT: a super user here).
    by_token = tokens_tool(acls, token_config(acls, "alice-token", token_id, token["hmac"], "java"), "--create",
                           "--max-life-time-period", "-1")
    assert by_token.returncode != 0 and "not allowed" in by_token.stdout + by_token.stderr, by_token
    plaintext = acls.workdir / "plaintext.properties"
    write_properties(plaintext, {"security.protocol": "PLAINTEXT"})
    anonymous = subprocess.run([*kafka_tools_java(), "org.apache.kafka.tools.DelegationTokenCommand",
                                "--bootstrap-server", acls.broker.bootstrap, "--command-config", str(plaintext),
                                "--create", "--max-life-time-period", "-1"], capture_output=True, text=True, timeout=120)
    assert anonymous.returncode != 0 and "not allowed" in anonymous.stdout + anonymous.stderr, anonymous
    # Renewed by its renewer; not by carol.
    renewed = tokens_tool(acls, bob, "--renew", "--hmac", token["hmac"], "--renew-time-period", "600000")
    assert renewed.returncode == 0 and "New expiry date" in renewed.stdout, renewed
    refused = tokens_tool(acls, carol, "--renew", "--hmac", token["hmac"], "--renew-time-period", "600000")
    assert refused.returncode != 0 and "OwnerMismatch" in refused.stdout + refused.stderr, refused
    # Described to its owner and renewer; to carol once she may describe alice's tokens. (Without
    # --owner-principal the tool asks for an empty list of owners, which Kafka answers with no tokens.)
    for who, seen in ((alice, True), (bob, True), (carol, False)):
        described = tokens_tool(acls, who, "--describe", "--owner-principal", "User:alice")
        assert described.returncode == 0, described.stderr[-2000:]
        assert (token_id in described_tokens(described.stdout)) == seen, described.stdout
    kafka_tool("org.apache.kafka.tools.AclCommand", "--bootstrap-server", acls.bootstrap, "--command-config",
               str(acls.command_config("admin")), "--add", "--allow-principal", "User:carol", "--operation",
               "DescribeTokens", "--user-principal", "User:alice")
    described = tokens_tool(acls, carol, "--describe", "--owner-principal", "User:alice")
    assert token_id in described_tokens(described.stdout), described.stdout
    # Expired now: the token authenticates no one.
    expired = tokens_tool(acls, alice, "--expire", "--hmac", token["hmac"], "--expiry-time-period", "-1")
    assert expired.returncode == 0, expired.stderr[-2000:]
    def refused(client: str):
        config = token_config(acls, "alice-token", token_id, token["hmac"], client)
        if client == "java":
            props = read_properties(config)
            props.update({"request.timeout.ms": "3000", "delivery.timeout.ms": "5000", "max.block.ms": "5000"})
            write_properties(config, props)
            run_tool(client, "produce", bootstrap=acls.bootstrap, topic=f"token-{client}", count=1, codec="none",
                     acks="all", seed=1, out=tmp_path / f"refused-{client}.out", client_config=config, wall_s=60)
        else:
            # franz-go's producer retries a refused login until its record times out; an admin request does not.
            run_tool(client, "create-topic", bootstrap=acls.bootstrap, topic="token-go", partitions=1,
                     client_config=config, wall_s=60)

    for failure in all_refused_quickly(lambda: refused("java"), lambda: refused("go")):
        assert "SASL" in str(failure) or "uthentication" in str(failure), failure
