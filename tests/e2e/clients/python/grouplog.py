"""The group-consume output file shared by the Python tools: one flushed line per processed record and per
assignment change (format in tests/e2e/README.md), plus the flags and SIGTERM handling both tools use."""

import signal
from typing import Iterable, Optional, Tuple

COMMIT_MODES = ("auto", "sync-after-processing", "sync-on-revoke")


class GroupLog:
    def __init__(self, path: str):
        self.f = open(path, "w", encoding="ascii")

    def line(self, text: str) -> None:
        self.f.write(text + "\n")
        # Flushed per line so a SIGKILL loses nothing that was processed.
        self.f.flush()

    def event(self, kind: str, tps: Iterable[Tuple[str, int]], member: str, generation: int) -> None:
        names = sorted(f"{t}:{p}" for t, p in tps)
        self.line(f"{kind} {','.join(names) or '-'} {member or '-'} {generation}")

    def record(self, topic: str, partition: int, offset: int, index: str, member: str, generation: int) -> None:
        self.line(f"rec {topic} {partition} {offset} {index} {member or '-'} {generation}")

    def close(self) -> None:
        self.f.close()


def record_index(headers) -> str:
    for k, v in headers or []:
        if k == "idx" and v is not None:
            return v.decode("ascii", "replace")
    return "-"


class Stop:
    """Set by SIGTERM/SIGINT: the poll loop ends and the member leaves the group cleanly."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, _signum, _frame) -> None:
        self.requested = True


def group_flags(a: dict) -> dict:
    """Validated group-consume flags with their defaults."""
    commit = a.get("commit", "auto")
    if commit not in COMMIT_MODES:
        raise SystemExit(f"--commit must be one of {COMMIT_MODES}")
    if ("topics" in a) == ("pattern" in a):
        raise SystemExit("exactly one of --topics and --pattern")
    return {
        "bootstrap": a["bootstrap"],
        "group": a["group"],
        "topics": a["topics"].split(",") if "topics" in a else None,
        "pattern": a.get("pattern"),
        "assignor": a.get("assignor", "range"),
        "protocol": a.get("protocol", "classic"),
        "commit": commit,
        "max_poll_interval_ms": int(a.get("max-poll-interval-ms", 300000)),
        "session_timeout_ms": int(a.get("session-timeout-ms", 45000)),
        "out": a["out"],
        "stop_after": int(a.get("stop-after", -1)),
        "idle_s": float(a.get("idle-s", -1)),
        "stall_after": int(a.get("stall-after", -1)),
        "stall_s": float(a.get("stall-s", 0)),
    }


def idle_expired(idle_s: float, active_since: Optional[float], now: float) -> bool:
    return idle_s >= 0 and active_since is not None and now - active_since > idle_s
