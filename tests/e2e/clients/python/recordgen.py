"""The deterministic record generator and output formats shared by the Python client tools and the tests.

The definition is in tests/e2e/README.md; the Java and Go tools implement the same bytes.
"""

import base64
import hashlib
import json
from typing import List, NamedTuple, Optional, Tuple

class GenRecord(NamedTuple):
    key: Optional[bytes]
    value: bytes
    headers: List[Tuple[str, bytes]]
    timestamp: int


def generate(seed: int, i: int) -> GenRecord:
    prefix = f"fjord-e2e:{seed}:{i}"
    h0 = hashlib.sha256(prefix.encode("ascii")).digest()
    value_len = 10 + ((h0[0] << 8) | h0[1]) % 291
    blocks = []
    have = 0
    k = 0
    while have < value_len:
        block = hashlib.sha256(f"{prefix}:{k}".encode("ascii")).digest()
        blocks.append(block)
        have += len(block)
        k += 1
    value = b"".join(blocks)[:value_len]
    if i % 3 == 0:
        # Every third value is lowercase text so the codecs have something to squeeze.
        value = bytes(0x61 + b % 26 for b in value)
    key = None if i % 17 == 5 else f"key-{seed}-{i}".encode("ascii")
    bin_len = 1 + h0[2] % 16
    headers = [("idx", str(i).encode("ascii")), ("bin", h0[3 : 3 + bin_len])]
    return GenRecord(key, value, headers, seed + i)


def _hex_or_dash(b: Optional[bytes]) -> str:
    return "-" if b is None else b.hex()


def consume_line(
    partition: int,
    offset: int,
    timestamp: int,
    key: Optional[bytes],
    value: Optional[bytes],
    headers: Optional[List[Tuple[str, Optional[bytes]]]],
) -> str:
    """One record in the canonical consume output format (no trailing newline)."""
    hs = ",".join(f"{k.encode('utf-8').hex()}:{_hex_or_dash(v)}" for k, v in headers or [])
    return f"{partition} {offset} {timestamp} {_hex_or_dash(key)} {_hex_or_dash(value)} {hs or '-'}"


def client_config(a: dict) -> dict:
    """The client settings of the properties file `--client-config` names (TLS, say), in the client's own naming, as
    Kafka's tools take `--command-config`; empty without one."""
    path = a.get("client-config")
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        pairs = (line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))
        props = {k.strip(): v.strip() for k, v in pairs}
    token_file = props.pop(OAUTH_TOKEN_FILE, None)
    if token_file is not None:
        if "sasl_mechanism" in props:  # kafka-python's naming
            from kafka.net.sasl.oauth import AbstractTokenProvider

            class FileTokenProvider(AbstractTokenProvider):
                def token(self):
                    return bearer_token(token_file)[0]
            props["sasl_oauth_token_provider"] = FileTokenProvider()
        else:
            props["oauth_cb"] = lambda _config: bearer_token(token_file)
    return props


# A client config key of these tools only: OAUTHBEARER with the (signed) token the named file holds, which neither
# librdkafka nor kafka-python can read from a file themselves (they take a callback).
OAUTH_TOKEN_FILE = "e2e.oauthbearer.token.file"


def bearer_token(path: str) -> Tuple[str, float]:
    """The JWT in file `path` and its expiry (seconds since the epoch, its `exp`)."""
    with open(path, encoding="ascii") as f:
        token = f.read().strip()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    return token, float(claims["exp"])


def parse_flags(argv: List[str]) -> dict:
    """The tools' shared CLI: `--name value` pairs plus the bare `--idempotent` switch."""
    out = {}
    it = iter(argv)
    for a in it:
        if not a.startswith("--"):
            raise SystemExit(f"unexpected argument {a}")
        name = a[2:]
        if name == "idempotent":
            out[name] = True
        else:
            try:
                out[name] = next(it)
            except StopIteration:
                raise SystemExit(f"missing value for {a}") from None
    return out
