"""Runs the test binaries cargo built (its JSON messages in argv[1]) argv[2] at a time; see scripts/cargo-test.sh.

Integration test binaries start first: they hold the slow tests; the slowest of them (SLOWEST, as measured) before
the others, so that none of them is left to run alone at the end. Every binary runs to its end even when another
failed, so one run names every failure; the exit code is 1 when any binary failed.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed


# The integration test binaries that take longest (compaction 75 s, apis 43 s, log_dir_move 36 s, log_dir_failure
# 31 s, replication_simulation 22 s, measured with three at a time), slowest first.
SLOWEST = ["compaction", "apis", "log_dir_move", "log_dir_failure", "replication_simulation", "group_limits"]


def binaries(path: str) -> list:
    """(name, executable, package directory) of every test binary, integration tests first."""
    found = []
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("profile", {}).get("test"):
                continue
            exe = msg.get("executable")
            if not exe:
                continue
            target = msg["target"]
            kind = target["kind"][0]
            package = os.path.dirname(msg["manifest_path"])
            name = f"{os.path.relpath(package)} {kind} {target['name']}"
            rank = SLOWEST.index(target["name"]) if kind == "test" and target["name"] in SLOWEST else len(SLOWEST)
            found.append(((kind != "test", rank), name, exe, package))
    found.sort(key=lambda b: b[0])  # stable: integration tests first, the slowest leading, else cargo's order
    return [b[1:] for b in found]


def run(binary, args: list) -> tuple:
    name, exe, package = binary
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        code = subprocess.call([exe, *args], cwd=package, stdout=out, stderr=subprocess.STDOUT)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return name, code, time.monotonic() - start, text


def main() -> int:
    path, jobs, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    failed = []
    todo = binaries(path)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for done in as_completed([pool.submit(run, b, args) for b in todo]):
            name, code, took, text = done.result()
            print(f"\n---- {name} ({took:.1f} s, exit {code})", flush=True)
            print(text, end="", flush=True)
            if code != 0:
                failed.append(name)
    print(f"\n{len(todo)} test binaries, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
