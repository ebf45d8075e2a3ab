"""Apache Kafka's DumpLogSegments must read the broker's segment and index files without complaint."""

import re
import subprocess

from harness import CODECS, check_acks, java_bin, read_acks, read_classpath, run_tool

PARTITIONS = 3
COUNT = 10_000
CLIENT = "go"

BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* compresscodec: (\w+) .* isvalid: (\w+)$")
RECORD = re.compile(r"^\| offset: (\d+) ")
INDEX_ENTRY = re.compile(r"^offset: \d+ position: \d+$")
TIMEINDEX_ENTRY = re.compile(r"^timestamp: \d+ offset: \d+$")
TROUBLE = re.compile(r"error|corrupt|mismatch|exception|not found|out of order|invalid", re.IGNORECASE)


def dump(files, *flags) -> str:
    cmd = [java_bin(), "-cp", read_classpath("kafka-broker.classpath"), "org.apache.kafka.tools.DumpLogSegments"]
    proc = subprocess.run(
        cmd + list(flags) + ["--files", ",".join(str(f) for f in files)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"DumpLogSegments exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    assert not proc.stderr.strip(), f"DumpLogSegments complained:\n{proc.stderr[-4000:]}"
    return proc.stdout


def metadata_part(line: str) -> str:
    """A record line without its key and payload, whose random bytes could spell anything."""
    return line.split(" key: ", 1)[0].split(" payload: ", 1)[0]


def test_dump_log(broker, tmp_path):
    topics = {}
    for n, codec in enumerate(CODECS):
        topic = f"dump-{codec}"
        run_tool(CLIENT, "create-topic", bootstrap=broker.bootstrap, topic=topic, partitions=PARTITIONS)
        out = tmp_path / f"{topic}.out"
        run_tool(
            CLIENT,
            "produce",
            bootstrap=broker.bootstrap,
            topic=topic,
            count=COUNT,
            codec=codec,
            acks="all",
            seed=900 + n,
            out=out,
        )
        acks = read_acks(out)
        assert len(acks) == COUNT
        check_acks(acks, PARTITIONS)
        topics[topic] = (codec, acks)
    # A clean stop makes the broker settle its segment and index files.
    broker.stop()

    for topic, (codec, acks) in topics.items():
        dirs = broker.partition_dirs(topic)
        assert [d.name for d in dirs] == [f"{topic}-{p}" for p in range(PARTITIONS)]
        for d in dirs:
            p = int(d.name.rsplit("-", 1)[1])
            produced = sum(1 for _, (ap, _) in acks.items() if ap == p)
            logs = sorted(d.glob("*.log"))
            assert logs, f"no segment files in {d}"

            batch_records = 0
            record_offsets = []
            for line in dump(logs, "--deep-iteration", "--print-data-log").splitlines():
                assert not TROUBLE.search(metadata_part(line)), f"{d.name}: {line[:300]}"
                if m := BATCH.match(line):
                    base, last, count, batch_codec, valid = m.groups()
                    assert valid == "true", f"{d.name}: {line[:300]}"
                    assert batch_codec == codec, f"{d.name}: batch compressed with {batch_codec}, sent {codec}"
                    assert int(last) - int(base) + 1 == int(count)
                    batch_records += int(count)
                elif m := RECORD.match(line):
                    record_offsets.append(int(m.group(1)))
            assert batch_records == produced, f"{d.name}: batches count {batch_records} records, produced {produced}"
            assert record_offsets == list(range(produced)), f"{d.name}: record offsets are not 0..{produced - 1}"

            indexes = sorted(d.glob("*.index")) + sorted(d.glob("*.timeindex"))
            assert len(indexes) == 2 * len(logs), f"{d.name}: expected an offset and a time index per segment"
            out = dump(indexes, "--deep-iteration")
            for line in out.splitlines():
                assert not TROUBLE.search(line), f"{d.name}: {line[:300]}"
            # Each segment is far larger than the default index interval, so both indexes have entries.
            assert any(INDEX_ENTRY.match(line) for line in out.splitlines()), f"{d.name}: empty offset index"
            assert any(TIMEINDEX_ENTRY.match(line) for line in out.splitlines()), f"{d.name}: empty time index"
