"""Exactly-once copying as Kafka's own transactions system test checks it, for test_exactly_once.py (one node) and
test_replication.py (three nodes): Kafka's TransactionalMessageCopier (kafka-tools, Java kafka-clients) copies every
input partition to an output topic in transactions that carry the consumed offsets, with random aborts, while
copiers and servers are killed with SIGKILL and restarted. A read_committed VerifiableConsumer must then find every
input message in the output exactly once."""

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from confluent_kafka import Producer

from harness import create_topics, kafka_tools_java, wait_for

PARTITIONS = 2
MESSAGES = 4000
TRANSACTION_SIZE = 25


def tool(main: str, *args: str) -> list:
    return [*kafka_tools_java(), f"org.apache.kafka.tools.{main}", *args]


class Copier:
    """One TransactionalMessageCopier for one input partition; restarted processes keep its transactional id."""

    def __init__(self, workdir: Path, bootstrap: str, partition: int, in_topic: str, out_topic: str, group: str):
        self.workdir, self.partition, self.runs, self.proc = workdir, partition, 0, None
        self.transactional_id = f"{group}-copier-{partition}"
        self.args = ["--input-topic", in_topic, "--input-partition", str(partition), "--output-topic", out_topic,
                     "--broker-list", bootstrap, "--consumer-group", group, "--transactional-id",
                     self.transactional_id, "--transaction-size", str(TRANSACTION_SIZE),
                     "--transaction-timeout", "10000", "--enable-random-aborts", "--use-group-metadata"]

    def out(self, run: int) -> Path:
        return self.workdir / f"copier-{self.partition}-{run}.out"

    def start(self) -> None:
        self.runs += 1
        with open(self.out(self.runs), "wb") as out, open(self.workdir / f"copier-{self.partition}-{self.runs}.err",
                                                          "wb") as err:
            self.proc = subprocess.Popen(tool("TransactionalMessageCopier", *self.args), stdout=out, stderr=err)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def processed(self) -> int:
        """Messages the current run has committed, from its last status line."""
        total = 0
        for line in self.out(self.runs).read_text(errors="replace").splitlines():
            if line.startswith("{"):
                total = json.loads(line).get("totalProcessed", total)
        return total


# A server fault: given the copiers and the output topic, kills something and brings it back.
ServerFault = Callable[[List[Copier], str], None]


def copy_exactly_once(bootstrap: str, workdir: Path, replication_factor: int,
                      server_faults: List[Tuple[str, int, ServerFault]], messages: int = MESSAGES) -> None:
    """Copies `messages` messages through one copier per input partition. Faults come while the copiers are mid-way,
    each once its copier's current run has committed a fifth of its partition: first each copier is killed (its
    successor fences it and aborts its open transaction), then each of `server_faults` (name, the copier whose
    progress it waits for, the fault) while the restarted copiers work."""
    tag = uuid.uuid4().hex[:8]
    in_topic, out_topic, group = f"eos-in-{tag}", f"eos-out-{tag}", f"eos-{tag}"
    create_topics(bootstrap, [in_topic, out_topic], PARTITIONS, replication_factor)
    # The input, spread evenly (a copier per partition must have work to be killed in).
    seed = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(messages):
        seed.produce(in_topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert seed.flush(60) == 0
    inputs = sorted(str(i) for i in range(messages))

    copiers = [Copier(workdir, bootstrap, p, in_topic, out_topic, group) for p in range(PARTITIONS)]
    for c in copiers:
        c.start()
    faults: List[Tuple[str, Copier, Optional[ServerFault]]] = [
        (f"copier-{c.partition}", c, None) for c in copiers]
    faults += [(name, copiers[waits_for], fault) for name, waits_for, fault in server_faults]
    try:
        threshold = messages // PARTITIONS // 5
        for name, victim, fault in faults:
            wait_for(lambda: victim.processed() >= threshold or victim.proc.poll() is not None,
                     f"{name}: its copier reaching {threshold} messages", 120)
            assert victim.proc.poll() is None, f"the copier finished before the {name} fault: input too small"
            if fault is None:
                victim.kill9()
                victim.start()
            else:
                fault(copiers, out_topic)
        for c in copiers:
            # A copier that never gets to the end was given a position beyond what it copied: input skipped.
            c.proc.wait(150)
            assert c.proc.returncode == 0, (c.workdir / f"copier-{c.partition}-{c.runs}.err").read_text()[-3000:]
    finally:
        # A failed run leaves no copier behind.
        for c in copiers:
            if c.proc.poll() is None:
                c.kill9()

    consumer_config = workdir / "consumer.properties"
    consumer_config.write_text("isolation.level=read_committed\n")
    out = workdir / "verifiable-consumer.out"
    with open(out, "wb") as stdout:
        reader = subprocess.Popen(tool("VerifiableConsumer", "--topic", out_topic, "--bootstrap-server",
                                       bootstrap, "--group-id", f"{group}-verify", "--reset-policy", "earliest",
                                       "--verbose", "--consumer.config", str(consumer_config)),
                                  stdout=stdout, stderr=subprocess.DEVNULL)

    def values():
        return [e["value"] for e in (json.loads(line) for line in out.read_text(errors="replace").splitlines()
                                     if line.startswith("{")) if e.get("name") == "record_data"]
    try:
        wait_for(lambda: len(values()) >= messages, "the output read back", 120)
        time.sleep(3)  # anything beyond the input (a duplicate) shows up too
    finally:
        reader.send_signal(signal.SIGTERM)
        reader.wait(30)
    copied = sorted(values())
    duplicates = len(copied) - len(set(copied))
    missing = sorted(set(inputs) - set(copied))
    assert duplicates == 0 and not missing and copied == inputs, (duplicates, missing[:20], len(copied))
