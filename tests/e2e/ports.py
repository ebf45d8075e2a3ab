"""Ports for the servers that tests and benchmarks start on loopback."""

import random
import socket

# Ports for servers come from below the kernel's ephemeral range (32768-60999 here), so that no outgoing connection's
# local port takes one between the moment it is chosen and the moment the server binds it, and none is handed out
# twice in one run.
_PORTS_GIVEN: set = set()
_PORT_RANGE = (20000, 32767)


def free_port() -> int:
    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(*_PORT_RANGE)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port in {_PORT_RANGE}")
