"""A TCP proxy that keeps cutting its clients' connections, for testing clients' group paths under connection churn.

Each proxy port forwards to one broker. While churn is on, every connection through it dies between `min_s` and
`max_s` seconds after it opened (or after churn was turned on), whatever is in flight: both sockets are reset, as
franz-go's KGO_TEST_CHAOS dialer kills its own connections. Clients see a dead connection and reconnect. Brokers
advertise the proxy's ports on their client listener, so every connection a client makes after bootstrapping goes
through it; the brokers' own links use another listener.
"""

import asyncio
import random
import threading
import time
from typing import List, Optional, Tuple

from harness import free_port


class ChurnProxy:
    def __init__(self, targets: List[Tuple[str, int]], seed: int, min_s: float = 0.5, max_s: float = 1.5):
        self.targets = targets
        self.ports = [free_port() for _ in targets]
        self.min_s, self.max_s = min_s, max_s
        self.rng = random.Random(seed)
        self.churn_since: Optional[float] = None
        self.cut = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.servers = []

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self.loop).result(10)

    def stop(self) -> None:
        async def close():
            for server in self.servers:
                server.close()
        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def set_churn(self, on: bool) -> None:
        """Turns churn on (connections already open die within `max_s` too) or off (they live on)."""
        self.churn_since = time.monotonic() if on else None

    async def _listen(self) -> None:
        for port, target in zip(self.ports, self.targets):
            self.servers.append(await asyncio.start_server(
                lambda r, w, t=target: self._serve(t, r, w), "127.0.0.1", port))

    async def _serve(self, target: Tuple[str, int], reader, writer) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.transport.abort()
            return
        opened = time.monotonic()
        lifetime = self.rng.uniform(self.min_s, self.max_s)
        pipes = [asyncio.ensure_future(self._pipe(reader, upstream_writer)),
                 asyncio.ensure_future(self._pipe(upstream_reader, writer))]
        while not any(p.done() for p in pipes):
            await asyncio.wait(pipes, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            since = self.churn_since
            if since is not None and time.monotonic() - max(opened, since) > lifetime:
                self.cut += 1
                break
        for p in pipes:
            p.cancel()
        writer.transport.abort()
        upstream_writer.transport.abort()

    @staticmethod
    async def _pipe(reader, writer) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            return
