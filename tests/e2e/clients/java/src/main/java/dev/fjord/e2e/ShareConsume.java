package dev.fjord.e2e;

import java.io.BufferedWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The share-consume command: a share group consumer (KafkaShareConsumer, KIP-932) that writes one line per record it
 * is given, {@code <partition> <offset> <delivery count> <what it did>}, so tests can check which records were
 * delivered how often. In explicit mode it releases the offsets in {@code --release} (a comma list; each on its first
 * delivery only, or on every delivery with {@code --release-always}), rejects those in {@code --reject}, and accepts
 * the rest; in implicit mode every record is accepted by the next poll. It stops after {@code --idle-ms} without
 * records once it has had some (before, it waits up to {@code --first-ms} for its assignment and first records), or
 * once it has seen {@code --max-records}; with {@code --hold-ms} it instead stops polling after its first records and
 * exits that much later without acknowledging them (as a consumer that hangs and dies would).
 *
 * <p>With {@code --report FILE} it also writes, for the fault tests, {@code d <partition> <offset> <delivery count>
 * <ms>} when it is given a record and, in explicit mode, {@code c <partition> <offset> ok|<error> <ms>} once
 * commitSync has answered for that record's acknowledgement (ms: the wall clock). {@code --pause-ms} waits that long
 * after each poll that returned records, to keep a consume going while nodes are killed.
 */
final class ShareConsume {
    private ShareConsume() {}

    static int run(Map<String, String> args) throws Exception {
        Properties props = ClientTool.clientProps(args);
        String mode = args.getOrDefault("mode", "implicit");
        props.put("group.id", args.get("group"));
        props.put("share.acknowledgement.mode", mode);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("max.poll.records", args.getOrDefault("max-poll-records", "50"));
        List<Long> release = offsets(args.get("release"));
        List<Long> reject = offsets(args.get("reject"));
        boolean releaseAlways = args.containsKey("release-always");
        long idleMs = Long.parseLong(args.getOrDefault("idle-ms", "5000"));
        long maxRecords = Long.parseLong(args.getOrDefault("max-records", "-1"));
        long holdMs = Long.parseLong(args.getOrDefault("hold-ms", "0"));
        long firstMs = Long.parseLong(args.getOrDefault("first-ms", "30000"));
        long pauseMs = Long.parseLong(args.getOrDefault("pause-ms", "0"));
        Path reportPath = args.containsKey("report") ? Path.of(args.get("report")) : null;
        long seen = 0;
        try (BufferedWriter out = Files.newBufferedWriter(Path.of(args.get("out")), StandardCharsets.US_ASCII);
                BufferedWriter report = reportPath == null ? null
                        : Files.newBufferedWriter(reportPath, StandardCharsets.US_ASCII);
                KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args.get("topic")));
            long lastRecord = System.currentTimeMillis();
            while (System.currentTimeMillis() - lastRecord < (seen == 0 ? firstMs : idleMs)
                    && (maxRecords < 0 || seen < maxRecords)) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                List<ConsumerRecord<byte[], byte[]>> acked = new java.util.ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    short delivery = r.deliveryCount().orElse((short) -1);
                    if (report != null) {
                        report.write("d " + r.partition() + " " + r.offset() + " " + delivery + " "
                                + System.currentTimeMillis() + "\n");
                    }
                    acked.add(r);
                    String action = "implicit";
                    if (mode.equals("explicit")) {
                        AcknowledgeType type = AcknowledgeType.ACCEPT;
                        if (release.contains(r.offset()) && (releaseAlways || delivery == 1)) {
                            type = AcknowledgeType.RELEASE;
                        } else if (reject.contains(r.offset())) {
                            type = AcknowledgeType.REJECT;
                        }
                        consumer.acknowledge(r, type);
                        action = type.name().toLowerCase();
                    }
                    out.write(r.partition() + " " + r.offset() + " " + delivery + " " + action + "\n");
                    seen++;
                }
                out.flush();
                if (!records.isEmpty()) {
                    lastRecord = System.currentTimeMillis();
                    if (holdMs > 0) {
                        // Hung: no further poll, no acknowledgement; then gone without closing.
                        Thread.sleep(holdMs);
                        Runtime.getRuntime().halt(0);
                    }
                    if (mode.equals("explicit")) {
                        commit(consumer, acked, report);
                    }
                    if (pauseMs > 0) {
                        Thread.sleep(pauseMs);
                    }
                }
            }
        }
        return 0;
    }

    /** Commits the acknowledgements and reports, per record, what commitSync said of its partition. */
    private static void commit(KafkaShareConsumer<byte[], byte[]> consumer, List<ConsumerRecord<byte[], byte[]>> acked,
            BufferedWriter report) throws java.io.IOException {
        Map<Integer, String> outcome = new java.util.HashMap<>();
        try {
            for (Map.Entry<org.apache.kafka.common.TopicIdPartition, java.util.Optional<org.apache.kafka.common.KafkaException>> e
                    : consumer.commitSync().entrySet()) {
                outcome.put(e.getKey().partition(), e.getValue().map(x -> x.getClass().getSimpleName()).orElse("ok"));
            }
        } catch (org.apache.kafka.common.KafkaException e) {
            for (ConsumerRecord<byte[], byte[]> r : acked) {
                outcome.put(r.partition(), e.getClass().getSimpleName());
            }
        }
        if (report == null) {
            return;
        }
        long now = System.currentTimeMillis();
        for (ConsumerRecord<byte[], byte[]> r : acked) {
            // A partition commitSync does not name had nothing of this poll to commit: not known to be durable.
            report.write("c " + r.partition() + " " + r.offset() + " " + outcome.getOrDefault(r.partition(), "unanswered")
                    + " " + now + "\n");
        }
        report.flush();
    }

    private static List<Long> offsets(String list) {
        if (list == null || list.isEmpty()) {
            return List.of();
        }
        return java.util.Arrays.stream(list.split(",")).map(Long::parseLong).toList();
    }
}
