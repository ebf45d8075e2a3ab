#!/usr/bin/env bash
# Installs everything the e2e suite (tests/e2e) needs, idempotently and without prompts:
#   - .venv/ with the pinned Python packages (pytest, confluent-kafka, kafka-python and its codecs, Playwright)
#   - Debian packages: iproute2, prometheus (promtool), chromium (for the console tests)
#   - the Java client tool (kafka-clients) and Apache Kafka's broker/tools classpath, via Maven
#   - the Go client tool (franz-go)
# Downloads land in ~/.m2, Go's module cache and .venv; build outputs in tests/e2e/.build. None is committed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E2E="$ROOT/tests/e2e"
BUILD="$E2E/.build"
PYTHON="${PYTHON:-python3}"
mkdir -p "$BUILD"

need() {
    command -v "$1" >/dev/null 2>&1 || { echo "install-test-deps: '$1' is required but not on PATH" >&2; exit 1; }
}
need "$PYTHON"
need java
need mvn
need go
# The network-partition tests put nodes in network namespaces (iproute2's `ip`, run as root).
if ! command -v ip >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2
fi

# The metrics tests scrape a cluster with a real Prometheus server and lint the exposition with its promtool
# (Debian's package). The package's own service is kept from starting: the tests run their own server.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    policy=/usr/sbin/policy-rc.d
    made_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
    if [ -n "$made_policy" ]; then rm -f "$policy"; fi
fi

# The console tests drive Debian's Chromium, headless, with Playwright (which cannot download a browser here).
if ! command -v chromium >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

echo "== python venv (.venv)"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    "$PYTHON" -m venv "$ROOT/.venv"
fi
# Reinstall only when the pins changed since the last successful install.
stamp="$ROOT/.venv/.e2e-requirements"
if ! cmp -s "$E2E/requirements.txt" "$stamp"; then
    "$ROOT/.venv/bin/pip" install --disable-pip-version-check -q -r "$E2E/requirements.txt"
    cp "$E2E/requirements.txt" "$stamp"
fi
# The confluent-kafka wheel must carry its own librdkafka; kafka-python must see every codec library.
"$ROOT/.venv/bin/python" - <<'PY'
import confluent_kafka, kafka.codec as c
v = confluent_kafka.version()
print(f"confluent-kafka {v[0] if isinstance(v, tuple) else v}, bundled librdkafka {confluent_kafka.libversion()[0]}")
missing = [n for n, ok in [("snappy", c.has_snappy()), ("lz4", c.has_lz4()), ("zstd", c.has_zstd())] if not ok]
if missing:
    raise SystemExit(f"kafka-python cannot use codecs: {missing}")
import kafka
print(f"kafka-python {kafka.__version__} with gzip, snappy, lz4, zstd")
PY

MVN=(mvn -B -q --no-transfer-progress -Dstyle.color=never)
# Maven 3.8 still writes colour resets in quiet batch mode; strip them so logs stay readable.
mvn_run() { "${MVN[@]}" "$@" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'; }

echo "== java client tool (kafka-clients)"
(cd "$E2E/clients/java" && mvn_run package dependency:build-classpath \
    -Dmdep.outputFile="$BUILD/java-client.classpath" -Dmdep.includeScope=runtime)
test -s "$BUILD/java/java-client-tool-0.1.0.jar"

echo "== apache kafka broker and tools classpath (kafka_2.13, kafka-tools)"
(cd "$E2E/kafka-broker" && mvn_run dependency:build-classpath \
    -Dmdep.outputFile="$BUILD/kafka-broker.classpath" -Dmdep.includeScope=runtime)
test -s "$BUILD/kafka-broker.classpath"

echo "== go client tool (franz-go)"
(cd "$E2E/clients/go" && go build -mod=readonly -o "$BUILD/franz-tool" .)

echo "== franz-go module source (its pkg/kgo group tests run from Go's module cache against the broker)"
franz_version="$(sed -n 's#^[[:space:]]*github.com/twmb/franz-go \(v[^ ]*\)$#\1#p' "$E2E/clients/go/go.mod")"
test -n "$franz_version"
(cd "$E2E/clients/go" && go mod download "github.com/twmb/franz-go@$franz_version")
# kafka-consumer-groups (ConsumerGroupCommand), VerifiableConsumer and VerifiableProducer come from the
# kafka-tools jar on the Kafka classpath resolved above.
grep -q "kafka-tools-" "$BUILD/kafka-broker.classpath"

echo "install-test-deps: ok"
