"""OAUTHBEARER with signed tokens: a listener that validates JWTs as Kafka's OAuthBearerValidatorCallbackHandler does,
against the JWKS of an identity provider (a file), with an expected audience and issuer.

- Every client authenticates with a token the provider signed, as the principal the token's subject names, and
  produces and consumes (the authorizer is on: the ACLs are the subject's).
- Tokens Kafka refuses are refused within seconds, with the error librdkafka reports for a failed authentication:
  expired, signed by a key the JWKS does not hold, for another audience or none, from another issuer, unsigned, with
  no issue time.
- A second listener fetches the JWKS from the identity provider over HTTPS (its CA in the JAAS text's truststore):
  once the provider adds a key, a token signed with it is taken without a restart.

One broker for the module (fjord, or Kafka with E2E_BROKER=kafka; Kafka 4's JVM must be allowed the JWKS URLs,
`-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls`); its own links and the test's admin on PLAINTEXT.
"""

import base64
import http.server
import json
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from confluent_kafka import KafkaError as ConfluentError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from harness import Pki, create_topics, free_port, make_broker, read_properties, round_trip, wait_for, write_properties
from recordgen import OAUTH_TOKEN_FILE

CLIENTS = ["java", "confluent", "go", "kafka-python"]
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
ISSUER, AUDIENCE = "https://idp.fjord.test", "kafka"
# The principal the tokens name, allowed to use the module's topics and groups; another one, allowed nothing.
SUBJECT, STRANGER = "svc-orders", "svc-stranger"
TOPIC_PREFIX = "oauth-"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class IdentityProvider:
    """An RSA key pair; its JWKS, and JWTs signed with it (RS256), made with openssl."""

    def __init__(self, workdir: Path, kid: str, name: Optional[str] = None):
        self.kid = kid
        self.key = workdir / f"{name or kid}.key"
        subprocess.run(["openssl", "genrsa", "-out", str(self.key), "2048"], check=True, capture_output=True)
        out = subprocess.run(["openssl", "rsa", "-in", str(self.key), "-noout", "-modulus"], check=True,
                             capture_output=True, text=True).stdout
        self.modulus = bytes.fromhex(out.strip().split("=", 1)[1])

    def jwks(self) -> Dict:
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid, "n": b64url(self.modulus),
                          "e": "AQAB"}]}

    def token(self, claims: Dict, signed: bool = True) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid} if signed else {"alg": "none"}
        message = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        if not signed:
            return message + "."
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=message.encode(),
                                   check=True, capture_output=True).stdout
        return message + "." + b64url(signature)


class JwksServer:
    """The identity provider's JWKS over HTTPS (a certificate for 127.0.0.1 from `pki`), as `keys` says now."""

    def __init__(self, pki: Pki, keys: List[Dict]):
        self.keys = keys
        pki.issue("idp", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"keys": served.keys}).encode()
                self.send_response(200 if self.path == "/jwks.json" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki.dir / "idp.crt"), str(pki.dir / "idp.key"))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def claims(subject: str = SUBJECT, **changes) -> Dict:
    """A token's claims: valid for an hour, for the expected audience, from the expected issuer; `changes` override
    (None drops a claim)."""
    now = int(time.time())
    base = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": now - 10, "exp": now + 3600, "scope": "kafka"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


class OAuthBroker:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.idp = IdentityProvider(workdir, "idp-1")
        self.jwks = workdir / "jwks.json"
        self.jwks.write_text(json.dumps(self.idp.jwks()))
        self.pki = Pki(workdir)
        self.jwks_server = JwksServer(self.pki, self.idp.jwks()["keys"])
        self.broker = make_broker(workdir / "broker")
        props = read_properties(self.broker.config)
        self.port, self.web_port = free_port(), free_port()
        added = f"OAUTH://127.0.0.1:{self.port},OAUTHWEB://127.0.0.1:{self.web_port}"
        props["listeners"] += "," + added
        props["advertised.listeners"] += "," + added
        props["listener.security.protocol.map"] = (props.get("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")
                                                   + ",OAUTH:SASL_PLAINTEXT,OAUTHWEB:SASL_PLAINTEXT")
        props["inter.broker.listener.name"] = "PLAINTEXT"
        jwks_url = self.jwks.as_uri()
        props.update({
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
            "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": jwks_url,
            # The provider's JWKS over HTTPS, its CA given as Kafka reads it for this: in the JAAS text. (A JAAS
            # text with options makes Kafka's broker log in with an unsecured token of its own: it names a subject.)
            "listener.name.oauthweb.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauthweb.oauthbearer.sasl.jaas.config": (
                f'{OAUTH_MODULE} required ssl.truststore.type="PEM" ssl.truststore.location="{self.pki.ca}" '
                'unsecuredLoginStringClaim_sub="broker";'),
            "listener.name.oauthweb.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "listener.name.oauthweb.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": self.jwks_server.url,
            "listener.name.oauthweb.oauthbearer.sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "1000",
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The PLAINTEXT listener's (and Kafka's controller listener's) principal.
            "super.users": "User:ANONYMOUS",
        })
        write_properties(self.broker.config, props)
        if self.broker.kind == "kafka":
            self.broker.jvm.insert(
                1, f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks_url},{self.jwks_server.url}")
        self.broker.start()
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        acls = [AclBinding(kind, name, ResourcePatternType.PREFIXED if name else ResourcePatternType.LITERAL,
                           f"User:{SUBJECT}", "*", AclOperation.ALL, AclPermissionType.ALLOW)
                for kind, name in ((ResourceType.TOPIC, TOPIC_PREFIX), (ResourceType.GROUP, "*"))]
        for future in admin.create_acls(acls).values():
            future.result(30)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def token_file(self, token: str, name: str) -> Path:
        path = self.workdir / f"{name}.jwt"
        path.write_text(token)
        return path

    def client_config(self, client: str, token_file: Path, workdir: Path) -> Path:
        """The properties file `client` authenticates with, presenting the token `token_file` holds."""
        if client == "java":
            # Kafka's own way: its login handler reads the token from a file: URL.
            props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                     "sasl.jaas.config": f"{OAUTH_MODULE} required;",
                     "sasl.login.callback.handler.class":
                         "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                     "sasl.oauthbearer.token.endpoint.url": token_file.as_uri()}
        elif client == "kafka-python":
            props = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                     OAUTH_TOKEN_FILE: str(token_file)}
        else:
            key = "sasl.mechanisms" if client == "confluent" else "sasl.mechanism"
            props = {"security.protocol": "SASL_PLAINTEXT", key: "OAUTHBEARER", OAUTH_TOKEN_FILE: str(token_file)}
        path = workdir / f"{client}-oauth.properties"
        write_properties(path, props)
        return path


@pytest.fixture(scope="module")
def oauth(tmp_path_factory):
    o = OAuthBroker(tmp_path_factory.mktemp("oauth"))
    yield o
    if o.broker.running():
        o.broker.stop()
    o.jwks_server.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip_with_a_signed_token(oauth: OAuthBroker, client: str, tmp_path: Path):
    """Authenticated by a token the identity provider signed, as its subject (whose ACLs allow the topic), produce
    with acks=all and consume back."""
    topic = f"{TOPIC_PREFIX}{client}"
    create_topics(oauth.broker.bootstrap, [topic], partitions=2, replication_factor=1)
    token = oauth.token_file(oauth.idp.token(claims()), f"good-{client}")
    config = oauth.client_config(client, token, tmp_path)
    round_trip(client, oauth.bootstrap, topic, 2, 300, "lz4", tmp_path, client_config=config)


def produce_one(bootstrap: str, token: str, topic: str) -> Optional[ConfluentError]:
    """librdkafka produces one record presenting `token`; the first error it reports (a failed authentication, the
    delivery's), or None once the record is delivered."""
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "OAUTHBEARER", "message.timeout.ms": 10000,
                         "oauth_cb": lambda _config: (token, time.time() + 3600),
                         "error_cb": errors.append})
    delivered = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    deadline = time.monotonic() + 20
    while not errors and not delivered and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    assert errors or delivered, "neither delivered nor refused within 20 s"
    return errors[0] if errors else delivered[0]


REFUSED = {
    "expired": lambda idp: idp.token(claims(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    # Another key, under the id of the provider's.
    "foreign-key": lambda idp: IdentityProvider(idp.key.parent, idp.kid, name="rogue").token(claims()),
    "other-audience": lambda idp: idp.token(claims(aud="billing")),
    "no-audience": lambda idp: idp.token(claims(aud=None)),
    "other-issuer": lambda idp: idp.token(claims(iss="https://evil.test")),
    "unsigned": lambda idp: idp.token(claims(), signed=False),
    "no-issue-time": lambda idp: idp.token(claims(iat=None)),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_token_kafka_refuses_is_refused_within_seconds(oauth: OAuthBroker, case: str):
    """librdkafka reports a failed authentication for the token; one that is valid is served afterwards."""
    topic = f"{TOPIC_PREFIX}refused-{case}"
    create_topics(oauth.broker.bootstrap, [topic], partitions=1, replication_factor=1)
    started = time.monotonic()
    error = produce_one(oauth.bootstrap, REFUSED[case](oauth.idp), topic)
    assert error is not None and error.code() == ConfluentError._AUTHENTICATION, error
    assert time.monotonic() - started < 15
    assert produce_one(oauth.bootstrap, oauth.idp.token(claims()), topic) is None


def test_the_principal_is_the_tokens_subject(oauth: OAuthBroker):
    """A valid token for a subject without ACLs authenticates, but the subject may not write the topic."""
    topic = f"{TOPIC_PREFIX}stranger"
    create_topics(oauth.broker.bootstrap, [topic], partitions=1, replication_factor=1)
    error = produce_one(oauth.bootstrap, oauth.idp.token(claims(subject=STRANGER)), topic)
    assert error is not None and error.code() == ConfluentError.TOPIC_AUTHORIZATION_FAILED, error


def test_a_key_the_identity_provider_adds_is_fetched_over_https(oauth: OAuthBroker):
    """On the listener whose JWKS comes over HTTPS: a token of the provider's key is taken once the JWKS was
    fetched, one of a key the provider does not serve is refused; once the provider adds a key, a token signed with it
    is taken (a token naming a key not held makes the broker fetch the JWKS again, though its refresh is an hour
    away)."""
    bootstrap = f"127.0.0.1:{oauth.web_port}"
    topic = f"{TOPIC_PREFIX}web"
    create_topics(oauth.broker.bootstrap, [topic], partitions=1, replication_factor=1)
    wait_for(lambda: produce_one(bootstrap, oauth.idp.token(claims()), topic) is None,
             "a token of the provider's key was not taken over the HTTPS JWKS", 30)
    unknown = IdentityProvider(oauth.workdir, "idp-unknown")
    error = produce_one(bootstrap, unknown.token(claims()), topic)
    assert error is not None and error.code() == ConfluentError._AUTHENTICATION, error
    # Kafka looks for a key id it did not find again only after a minute: the added key is one never asked for.
    added = IdentityProvider(oauth.workdir, "idp-2")
    oauth.jwks_server.keys = oauth.idp.jwks()["keys"] + added.jwks()["keys"]
    wait_for(lambda: produce_one(bootstrap, added.token(claims()), topic) is None,
             "a token of the key the provider added was not taken", 30)
