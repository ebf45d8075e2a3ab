"""TLS listeners: every client reaches the broker over SSL with PEM certificates made by openssl, with a client
certificate where the listener requires one and without one where it does not, and a client that lacks a
certificate the listener requires, or shows one it does not trust, fails within seconds as it normally reports it,
while the broker serves everyone else.

One broker for the module (fjord, or Kafka with E2E_BROKER=kafka): its own links on PLAINTEXT, and two SSL
listeners configured through Kafka's per-listener keys: MTLS (`ssl.client.auth=required`, its keystore and truststore
PKCS12, made by `openssl pkcs12` and `keytool`) and TLS (no client certificate, its key PEM encrypted with
`ssl.key.password`). Kafka reads such a key (PKCS#8, PBES2) on JDK 21 and later: run the Kafka mode with JAVA_HOME
set to one (JDK 17 refuses the key at start). The TLS listener's keystore is then changed with `kafka-configs`
(Kafka's dynamic listener configs) while the broker runs.
"""

import concurrent.futures
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer
from kafka.errors import KafkaError

from harness import (Pki, create_topics, free_port, kafka_tools_java, make_broker, openssl, read_properties, round_trip,
                     run_tool, wait_for, write_properties)

CLIENTS = ["java", "confluent", "go", "kafka-python"]


class TlsBroker:
    def __init__(self, workdir: Path):
        self.pki = Pki(workdir)
        self.pki.issue("broker", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
        self.pki.issue("client", "/CN=client/OU=e2e")
        self.broker = make_broker(workdir / "broker")
        props = read_properties(self.broker.config)
        self.ports = {"MTLS": free_port(), "TLS": free_port()}
        added = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        props["listeners"] += "," + added
        props["advertised.listeners"] += "," + added
        props["listener.security.protocol.map"] = (props.get("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")
                                                   + ",MTLS:SSL,TLS:SSL")
        props["inter.broker.listener.name"] = "PLAINTEXT"
        # MTLS: PKCS12 stores.
        openssl(workdir, "pkcs12", "-export", "-inkey", "broker.key", "-in", "broker.crt", "-out", "broker.p12",
                "-passout", "pass:store-pw")
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(self.pki.ca),
                        "-keystore", str(workdir / "trust.p12"), "-storetype", "PKCS12", "-storepass", "trust-pw"],
                       check=True, capture_output=True, timeout=60)
        props.update({
            "listener.name.mtls.ssl.keystore.type": "PKCS12",
            "listener.name.mtls.ssl.keystore.location": str(workdir / "broker.p12"),
            "listener.name.mtls.ssl.keystore.password": "store-pw",
            "listener.name.mtls.ssl.truststore.type": "PKCS12",
            "listener.name.mtls.ssl.truststore.location": str(workdir / "trust.p12"),
            "listener.name.mtls.ssl.truststore.password": "trust-pw",
            "listener.name.mtls.ssl.client.auth": "required",
        })
        # TLS: the key PEM, encrypted (PKCS#8, AES-256).
        openssl(workdir, "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "broker.key", "-out", "broker-enc.key",
                "-passout", "pass:key-pw")
        (workdir / "broker-enc.pem").write_text((workdir / "broker-enc.key").read_text()
                                                + (workdir / "broker.crt").read_text())
        props.update({
            "listener.name.tls.ssl.keystore.type": "PEM",
            "listener.name.tls.ssl.keystore.location": str(workdir / "broker-enc.pem"),
            "listener.name.tls.ssl.key.password": "key-pw",
        })
        write_properties(self.broker.config, props)
        self.broker.start()

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_config(self, client: str, workdir: Path, identity: Optional[str] = "client",
                      extra: Optional[Dict[str, str]] = None) -> Path:
        """The properties file `client` reaches an SSL listener with, presenting `identity`'s certificate (none when
        None)."""
        d = self.pki.dir
        if client == "java":
            props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                     "ssl.truststore.location": str(self.pki.ca)}
            if identity:
                props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(d / f"{identity}.pem")})
        elif client == "kafka-python":
            props = {"security_protocol": "SSL", "ssl_cafile": str(self.pki.ca)}
            if identity:
                props.update({"ssl_certfile": str(d / f"{identity}.crt"), "ssl_keyfile": str(d / f"{identity}.key")})
        else:
            props = {"security.protocol": "SSL", "ssl.ca.location": str(self.pki.ca)}
            if identity:
                props.update({"ssl.certificate.location": str(d / f"{identity}.crt"),
                              "ssl.key.location": str(d / f"{identity}.key")})
        props.update(extra or {})
        path = workdir / f"{client}-{identity}.properties"
        write_properties(path, props)
        return path


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    t = TlsBroker(tmp_path_factory.mktemp("tls"))
    yield t
    if t.broker.running():
        t.broker.stop()


@pytest.mark.parametrize("listener", ["MTLS", "TLS"])
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip_over_tls(tls: TlsBroker, client: str, listener: str, tmp_path: Path):
    """Produce with acks=all and consume back over SSL: with a client certificate on MTLS, without one on TLS."""
    topic = f"tls-{client}-{listener}".lower()
    create_topics(tls.broker.bootstrap, [topic], partitions=2, replication_factor=1)
    identity = "client" if listener == "MTLS" else None
    config = tls.client_config(client, tmp_path, identity)
    round_trip(client, tls.bootstrap(listener), topic, 2, 300, "lz4", tmp_path, client_config=config)


def refused_quickly(attempt) -> Exception:
    """Runs `attempt`, which must fail; what it failed with. Within seconds: a client is not left hanging."""
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        attempt()
    assert time.monotonic() - started < 30, "refused, but not within seconds"
    return failure.value


def all_refused_quickly(*attempts) -> List[Exception]:
    """`refused_quickly` for each attempt, all at once (each client waits out its own timeouts); what each failed
    with, in order."""
    with concurrent.futures.ThreadPoolExecutor(len(attempts)) as pool:
        return list(pool.map(refused_quickly, attempts))


@pytest.mark.parametrize("identity", [None, "stranger"])
def test_a_client_without_a_trusted_certificate_is_refused_where_one_is_required(tls: TlsBroker, identity: str,
                                                                                  tmp_path: Path):
    """librdkafka, kafka-python and Java fail to connect to MTLS with no certificate or one from another CA."""
    if identity == "stranger":
        other = Pki(tls.pki.dir, ca="other-ca")
        other.issue("stranger", "/CN=stranger")
    bootstrap = tls.bootstrap("MTLS")

    def confluent():
        conf = {"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "socket.timeout.ms": 5000,
                **read_properties(tls.client_config("confluent", tmp_path, identity))}
        producer = Producer(conf)
        failed = []
        producer.produce("tls-refused", b"v", on_delivery=lambda err, msg: failed.append(err))
        producer.flush(20)
        if failed and failed[0] is not None:
            raise KafkaException(failed[0])

    def kafka_python():
        conf = read_properties(tls.client_config("kafka-python", tmp_path, identity))
        producer = KafkaProducer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=5000, max_block_ms=5000, **conf)
        try:
            producer.send("tls-refused", b"v").get(timeout=10)
        finally:
            producer.close(timeout=1)

    def java():
        extra = {"default.api.timeout.ms": "5000", "request.timeout.ms": "3000"}
        run_tool("java", "create-topic", bootstrap=bootstrap, topic="tls-refused", partitions=1,
                 client_config=tls.client_config("java", tmp_path, identity, extra), wall_s=60)

    _, python_failure, _ = all_refused_quickly(confluent, kafka_python, java)
    assert isinstance(python_failure, KafkaError), python_failure
    # Everyone else is still served.
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         **read_properties(tls.client_config("confluent", tmp_path, "client"))})
    assert admin.list_topics(timeout=10).topics is not None


def presented_certificate(port: int, ca: Path) -> bytes:
    """The certificate a new TLS connection to `port` is shown (DER)."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def test_a_keystore_changed_with_kafka_configs_is_used_by_new_connections(tls: TlsBroker, tmp_path: Path):
    """`kafka-configs --entity-type brokers --entity-name 1 --alter --add-config
    listener.name.tls.ssl.keystore.location=…` on the running broker: new connections are shown the new certificate
    (same subject and names), and clients go on working; the same location set again after its file was replaced
    loads the file again. A certificate for another subject is refused, as is the change at the cluster-wide default,
    and the listener keeps its certificate."""
    d = tls.pki.dir

    def encrypted_keystore(name: str, subject: str) -> Path:
        tls.pki.issue(name, subject, "DNS:localhost,IP:127.0.0.1")
        openssl(d, "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", f"{name}.key", "-out", f"{name}-enc.key",
                "-passout", "pass:key-pw")
        path = d / f"{name}-enc.pem"
        path.write_text((d / f"{name}-enc.key").read_text() + (d / f"{name}.crt").read_text())
        return path

    def der(name: str) -> bytes:
        return ssl.PEM_cert_to_DER_cert((d / f"{name}.crt").read_text())

    def set_keystore(path: Path, entity=("--entity-name", "1")) -> subprocess.CompletedProcess:
        return subprocess.run([*kafka_tools_java(), "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server",
                               tls.broker.bootstrap, "--entity-type", "brokers", *entity, "--alter", "--add-config",
                               f"listener.name.tls.ssl.keystore.location={path}"],
                              capture_output=True, text=True, timeout=120)

    port = tls.ports["TLS"]
    assert presented_certificate(port, tls.pki.ca) == der("broker")
    renewed = encrypted_keystore("renewed", "/CN=localhost")
    changed = set_keystore(renewed)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    wait_for(lambda: presented_certificate(port, tls.pki.ca) == der("renewed"), "the new certificate not shown", 30)
    topic = "tls-renewed"
    create_topics(tls.broker.bootstrap, [topic], partitions=1, replication_factor=1)
    round_trip("confluent", tls.bootstrap("TLS"), topic, 1, 50, "none", tmp_path,
               client_config=tls.client_config("confluent", tmp_path, None))
    # Renewed in place: the file replaced, the same location set again.
    again = encrypted_keystore("again", "/CN=localhost")
    renewed.write_text(again.read_text())
    changed = set_keystore(renewed)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    wait_for(lambda: presented_certificate(port, tls.pki.ca) == der("again"), "the file set again not loaded", 30)
    # Another subject: refused, as is the cluster-wide default; the listener keeps its certificate.
    stranger = encrypted_keystore("impostor", "/CN=impostor")
    for entity in (["--entity-name", "1"], ["--entity-default"]):
        refused = set_keystore(stranger, entity)
        assert refused.returncode != 0, refused.stdout
    assert presented_certificate(port, tls.pki.ca) == der("again")
