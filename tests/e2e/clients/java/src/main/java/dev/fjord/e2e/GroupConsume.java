package dev.fjord.e2e;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The group-consume command for kafka-clients: a consumer group member that logs every processed record and
 * every assignment change to a file (format in tests/e2e/README.md), so tests can check delivery guarantees.
 */
final class GroupConsume {
    private final BufferedWriter out;
    private final KafkaConsumer<byte[], byte[]> consumer;
    private final String commit;
    /** Offsets to commit next: one past the last processed record per partition. */
    private final Map<TopicPartition, OffsetAndMetadata> processed = new HashMap<>();
    /** When the idle clock started: the last record or assignment; 0 until the first assignment. */
    private long activeSince;

    private GroupConsume(BufferedWriter out, KafkaConsumer<byte[], byte[]> consumer, String commit) {
        this.out = out;
        this.consumer = consumer;
        this.commit = commit;
    }

    static int run(Map<String, String> args) throws Exception {
        String protocol = args.getOrDefault("protocol", "classic");
        String commit = args.get("commit");
        if (!List.of("auto", "sync-after-processing", "sync-on-revoke").contains(commit)) {
            throw new IllegalArgumentException("--commit must be auto|sync-after-processing|sync-on-revoke");
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, Boolean.toString(commit.equals("auto")));
        props.put(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "500");
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, args.getOrDefault("max-poll-interval-ms", "300000"));
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        // Picks up topics created after subscribing (regex) without waiting the default five minutes.
        props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "2000");
        if (protocol.equals("classic")) {
            // With the consumer protocol the broker owns timeouts and assignors; the client must not set them.
            int session = Integer.parseInt(args.getOrDefault("session-timeout-ms", "45000"));
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(session));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(Math.max(100, session / 4)));
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(args.get("assignor")));
        } else if (args.containsKey("assignor")) {
            // KIP-848 server-side assignors: uniform or range.
            props.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, args.get("assignor"));
        }
        long stopAfter = Long.parseLong(args.getOrDefault("stop-after", "-1"));
        double idleS = Double.parseDouble(args.getOrDefault("idle-s", "-1"));
        long stallAfter = Long.parseLong(args.getOrDefault("stall-after", "-1"));
        double stallS = Double.parseDouble(args.getOrDefault("stall-s", "0"));

        try (BufferedWriter out = Files.newBufferedWriter(Path.of(args.get("out")), StandardCharsets.US_ASCII);
                KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            GroupConsume g = new GroupConsume(out, consumer, commit);
            CountDownLatch done = new CountDownLatch(1);
            // SIGTERM leaves the group cleanly: wake the poll loop and let it close the consumer.
            Thread hook = new Thread(() -> {
                consumer.wakeup();
                try {
                    done.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            Runtime.getRuntime().addShutdownHook(hook);
            try {
                return g.loop(args, stopAfter, idleS, stallAfter, stallS);
            } finally {
                done.countDown();
            }
        }
    }

    private static String assignorClass(String name) {
        return switch (name == null ? "range" : name) {
            case "range" -> RangeAssignor.class.getName();
            case "roundrobin" -> RoundRobinAssignor.class.getName();
            case "sticky" -> StickyAssignor.class.getName();
            case "cooperative-sticky" -> CooperativeStickyAssignor.class.getName();
            default -> throw new IllegalArgumentException("unknown assignor " + name);
        };
    }

    private String member() {
        return consumer.groupMetadata().memberId();
    }

    private int generation() {
        return consumer.groupMetadata().generationId();
    }

    private void event(String kind, Collection<TopicPartition> tps) {
        String list = tps.stream().map(tp -> tp.topic() + ":" + tp.partition()).sorted()
                .collect(Collectors.joining(","));
        write(kind + " " + (list.isEmpty() ? "-" : list) + " " + member() + " " + generation());
    }

    private void write(String line) {
        try {
            out.write(line);
            out.write('\n');
            out.flush();
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Commits what was processed on `tps` (all partitions when null) and forgets it. */
    private void commitProcessed(Collection<TopicPartition> tps) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        processed.forEach((tp, om) -> {
            if (tps == null || tps.contains(tp)) {
                offsets.put(tp, om);
            }
        });
        if (offsets.isEmpty()) {
            return;
        }
        try {
            consumer.commitSync(offsets);
            offsets.keySet().forEach(processed::remove);
            write("commit " + offsets.entrySet().stream()
                    .map(e -> e.getKey().topic() + ":" + e.getKey().partition() + "=" + e.getValue().offset())
                    .sorted().collect(Collectors.joining(",")));
        } catch (WakeupException e) {
            // SIGTERM arrived during the commit: let the poll loop see it and close.
            throw e;
        } catch (RuntimeException e) {
            // A member that was removed from the group cannot commit; its records go to the next owner.
            offsets.keySet().forEach(processed::remove);
            write("commit-failed " + e.getClass().getSimpleName());
        }
    }

    private int loop(Map<String, String> args, long stopAfter, double idleS, long stallAfter, double stallS)
            throws InterruptedException {
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                event("revoke", tps);
                if (!commit.equals("auto")) {
                    commitProcessed(tps);
                }
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                event("assign", tps);
                activeSince = System.nanoTime();
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> tps) {
                event("lost", tps);
                tps.forEach(processed::remove);
            }
        };
        if (args.containsKey("pattern") && "consumer".equals(args.getOrDefault("protocol", "classic"))) {
            // KIP-848: the broker resolves the regex (RE2/J syntax), as the consumer protocol intends.
            consumer.subscribe(new SubscriptionPattern(args.get("pattern")), listener);
        } else if (args.containsKey("pattern")) {
            consumer.subscribe(Pattern.compile(args.get("pattern")), listener);
        } else {
            consumer.subscribe(List.of(args.get("topics").split(",")), listener);
        }
        long count = 0;
        boolean stalled = false;
        try {
            while (stopAfter < 0 || count < stopAfter) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    write("rec " + r.topic() + " " + r.partition() + " " + r.offset() + " " + index(r) + " "
                            + member() + " " + generation());
                    processed.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    count++;
                }
                if (!records.isEmpty()) {
                    activeSince = System.nanoTime();
                    if (commit.equals("sync-after-processing")) {
                        commitProcessed(null);
                    }
                } else if (idleS >= 0 && activeSince != 0 && System.nanoTime() - activeSince > idleS * 1e9) {
                    break;
                }
                if (!stalled && stallAfter >= 0 && count >= stallAfter) {
                    stalled = true;
                    write("stall " + stallS);
                    Thread.sleep((long) (stallS * 1000));
                    write("resume");
                }
            }
            if (!commit.equals("auto")) {
                commitProcessed(null);
            }
        } catch (WakeupException e) {
            // SIGTERM: fall through to close, which commits (auto) or runs the revocation callback.
            write("wakeup");
        }
        consumer.close();
        write("closed " + count);
        return 0;
    }

    private static String index(ConsumerRecord<byte[], byte[]> r) {
        Header h = r.headers().lastHeader("idx");
        return h == null || h.value() == null ? "-" : new String(h.value(), StandardCharsets.US_ASCII);
    }
}
