"""Apache Kafka's DumpLogSegments must read the broker's segment and index files without complaint."""

import re
import subprocess

from harness import CODECS, check_acks, fresh_seed, kafka_tools_java, read_acks, run_tool

PARTITIONS = 3
COUNT = 10_000
CLIENT = "go"

BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* compresscodec: (\w+) .* isvalid: (\w+)$")
RECORD = re.compile(r"^\| offset: (\d+) ")
INDEX_ENTRY = re.compile(r"^offset: \d+ position: \d+$")
TIMEINDEX_ENTRY = re.compile(r"^timestamp: \d+ offset: \d+$")
TROUBLE = re.compile(r"error|corrupt|mismatch|exception|not found|out of order|invalid", re.IGNORECASE)


def dump(files, *flags) -> str:
    cmd = [*kafka_tools_java(), "org.apache.kafka.tools.DumpLogSegments"]
    proc = subprocess.run(
        cmd + list(flags) + ["--files", ",".join(str(f) for f in files)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"DumpLogSegments exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    assert not proc.stderr.strip(), f"DumpLogSegments complained:\n{proc.stderr[-4000:]}"
    return proc.stdout


def by_file(output: str) -> dict:
    """Splits DumpLogSegments output into {file path: its lines}, keyed by the "Dumping <path>" headers."""
    sections = {}
    current = None
    for line in output.splitlines():
        if line.startswith("Dumping "):
            current = sections.setdefault(line[len("Dumping ") :].strip(), [])
        elif current is not None:
            current.append(line)
        else:
            raise AssertionError(f"DumpLogSegments output before any file header: {line[:300]}")
    return sections


def metadata_part(line: str) -> str:
    """A record line without its key and payload, whose random bytes could spell anything."""
    return line.split(" key: ", 1)[0].split(" payload: ", 1)[0]


def test_dump_log(broker, tmp_path):
    topics = {}
    for codec in CODECS:
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
            seed=fresh_seed(),
            out=out,
        )
        acks = read_acks(out)
        assert len(acks) == COUNT
        check_acks(acks, PARTITIONS)
        topics[topic] = (codec, acks)
    # A clean stop makes the broker settle its segment and index files.
    broker.stop()

    segments = {}  # partition dir -> segment files
    indexes = {}
    for topic in topics:
        dirs = broker.partition_dirs(topic)
        assert [d.name for d in dirs] == [f"{topic}-{p}" for p in range(PARTITIONS)]
        for d in dirs:
            segments[d] = sorted(d.glob("*.log"))
            assert segments[d], f"no segment files in {d}"
            indexes[d] = sorted(d.glob("*.index")) + sorted(d.glob("*.timeindex"))
            assert len(indexes[d]) == 2 * len(segments[d]), f"{d.name}: want an offset and a time index per segment"

    # One JVM per kind of file keeps the test quick; the output is split back up per file.
    log_dump = by_file(dump([f for fs in segments.values() for f in fs], "--deep-iteration", "--print-data-log"))
    index_dump = by_file(dump([f for fs in indexes.values() for f in fs], "--deep-iteration"))

    for d, files in segments.items():
        topic, p = d.name.rsplit("-", 1)
        codec, acks = topics[topic]
        produced = sum(1 for ap, _ in acks.values() if ap == int(p))
        batch_records = 0
        record_offsets = []
        for f in files:
            assert str(f) in log_dump, f"DumpLogSegments skipped {f}"
            for line in log_dump[str(f)]:
                assert not TROUBLE.search(metadata_part(line)), f"{d.name}: {line[:300]}"
                if m := BATCH.match(line):
                    base, last, count, batch_codec, valid = m.groups()
                    assert valid == "true", f"{d.name}: {line[:300]}"
                    assert batch_codec == codec, f"{d.name}: batch compressed with {batch_codec}, sent {codec}"
                    assert int(last) - int(base) + 1 == int(count), f"{d.name}: {line[:300]}"
                    batch_records += int(count)
                elif m := RECORD.match(line):
                    record_offsets.append(int(m.group(1)))
        assert batch_records == produced, f"{d.name}: batches count {batch_records} records, produced {produced}"
        assert record_offsets == list(range(produced)), f"{d.name}: record offsets are not 0..{produced - 1}"

        for f in indexes[d]:
            assert str(f) in index_dump, f"DumpLogSegments skipped {f}"
            lines = index_dump[str(f)]
            for line in lines:
                assert not TROUBLE.search(line), f"{f}: {line[:300]}"
            # Each segment is far larger than the default index interval, so both indexes have entries.
            entry = INDEX_ENTRY if f.suffix == ".index" else TIMEINDEX_ENTRY
            assert any(entry.match(line) for line in lines), f"{f}: no index entries"
