package dev.fjord.e2e;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** The e2e client tool for kafka-clients: create-topic, produce and consume with the suite's common CLI. */
public final class ClientTool {
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            System.err.println("usage: create-topic|produce|consume|group-consume|share-consume|produce-kv|dump|alter-log-dir --bootstrap B ...");
            System.exit(64);
        }
        Map<String, String> args = parseFlags(argv);
        int rc;
        switch (argv[0]) {
            case "create-topic" -> rc = createTopic(args);
            case "produce" -> rc = produce(args);
            case "consume" -> rc = consume(args);
            case "group-consume" -> rc = GroupConsume.run(args);
            case "share-consume" -> rc = ShareConsume.run(args);
            case "produce-kv" -> rc = produceKv(args);
            case "dump" -> rc = dump(args);
            case "alter-log-dir" -> rc = alterLogDir(args);
            default -> {
                System.err.println("unknown command " + argv[0]);
                rc = 64;
            }
        }
        System.exit(rc);
    }

    private static Map<String, String> parseFlags(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            String name = a.substring(2);
            if (name.equals("idempotent") || name.equals("abort") || name.equals("release-always")) {
                out.put(name, "true");
            } else if (i + 1 < argv.length) {
                out.put(name, argv[++i]);
            } else {
                throw new IllegalArgumentException("missing value for " + a);
            }
        }
        return out;
    }

    /**
     * The client's properties: the bootstrap servers, and those of the properties file {@code --client-config} names
     * (TLS settings, say), as Kafka's own tools take {@code --command-config}.
     */
    static Properties clientProps(Map<String, String> args) throws java.io.IOException {
        Properties props = new Properties();
        String file = args.get("client-config");
        if (file != null) {
            try (java.io.Reader reader = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(file))) {
                props.load(reader);
            }
        }
        props.put("bootstrap.servers", need(args, "bootstrap"));
        // Kafka 4 reads an OAUTHBEARER token endpoint only where the JVM allows its URL.
        String tokenUrl = props.getProperty("sasl.oauthbearer.token.endpoint.url");
        if (tokenUrl != null) {
            System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls", tokenUrl);
        }
        return props;
    }

    private static String need(Map<String, String> args, String name) {
        String v = args.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    private static int createTopic(Map<String, String> args) throws Exception {
        Properties props = clientProps(args);
        try (Admin admin = Admin.create(props)) {
            NewTopic topic = new NewTopic(need(args, "topic"), Integer.parseInt(need(args, "partitions")), (short) 1);
            admin.createTopics(List.of(topic)).all().get();
        }
        return 0;
    }

    /** Admin.alterReplicaLogDirs for one partition on broker 1; prints "ok" or the error's class name. */
    private static int alterLogDir(Map<String, String> args) throws Exception {
        Properties props = clientProps(args);
        TopicPartitionReplica replica =
                new TopicPartitionReplica(need(args, "topic"), Integer.parseInt(need(args, "partition")), 1);
        try (Admin admin = Admin.create(props)) {
            try {
                admin.alterReplicaLogDirs(Map.of(replica, need(args, "dir"))).all().get();
                System.out.println("ok");
            } catch (java.util.concurrent.ExecutionException e) {
                System.out.println(e.getCause().getClass().getSimpleName());
            }
        }
        return 0;
    }

    private static int produce(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        long count = Long.parseLong(need(args, "count"));
        long seed = Long.parseLong(need(args, "seed"));
        // With --transactional-id, every record in one transaction, committed once all are acknowledged.
        String transactionalId = args.get("transactional-id");
        boolean idempotent = args.containsKey("idempotent") || transactionalId != null;
        Properties props = clientProps(args);
        props.put(ProducerConfig.ACKS_CONFIG, need(args, "acks"));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, need(args, "codec"));
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent));
        if (transactionalId != null) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        // Long enough to ride out a broker restart in the kill -9 test.
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        try (BufferedWriter out = Files.newBufferedWriter(Path.of(need(args, "out")), StandardCharsets.US_ASCII);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            int partitions = producer.partitionsFor(topic).size();
            if (transactionalId != null) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (long i = 0; i < count; i++) {
                RecordGen r = RecordGen.of(seed, i);
                List<Header> headers = new ArrayList<>();
                for (int h = 0; h < r.headerKeys.length; h++) {
                    headers.add(new RecordHeader(r.headerKeys[h], r.headerValues[h]));
                }
                int partition = (int) (i % partitions);
                ProducerRecord<byte[], byte[]> rec =
                        new ProducerRecord<>(topic, partition, r.timestamp, r.key, r.value, headers);
                final long index = i;
                producer.send(rec, (md, err) -> {
                    if (err != null) {
                        failed.incrementAndGet();
                        firstError.compareAndSet(null, err);
                        return;
                    }
                    // Callbacks run on the producer's I/O thread, one at a time.
                    try {
                        out.write(index + " " + md.partition() + " " + md.offset() + "\n");
                        out.flush();
                    } catch (IOException e) {
                        throw new UncheckedIOException(e);
                    }
                });
            }
            producer.flush();
            if (transactionalId != null && failed.get() == 0) {
                // With --abort, the transaction is aborted instead (its records are then never to be read
                // committed).
                if (args.containsKey("abort")) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
            }
            // With --hold-ms, the producer stays open that long after its last record (its
            // client-metrics pushes go on meanwhile).
            Thread.sleep(Long.parseLong(args.getOrDefault("hold-ms", "0")));
        }
        if (failed.get() > 0) {
            System.err.println("produce: " + failed.get() + " records failed; first error: " + firstError.get());
            return 1;
        }
        return 0;
    }

    /** Sends the (key, value) lines of --input in order to partition 0; waits for every acknowledgement. */
    private static int produceKv(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        Properties props = clientProps(args);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(args.containsKey("idempotent")));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.getOrDefault("codec", "none"));
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (String line : Files.readAllLines(Path.of(need(args, "input")), StandardCharsets.US_ASCII)) {
                String[] kv = line.split(" ");
                byte[] key = HEX.parseHex(kv[0]);
                byte[] value = kv[1].equals("-") ? null : HEX.parseHex(kv[1]);
                producer.send(new ProducerRecord<>(topic, 0, key, value), (md, err) -> {
                    if (err != null) {
                        failed.incrementAndGet();
                        firstError.compareAndSet(null, err);
                    }
                });
            }
            producer.flush();
        }
        if (failed.get() > 0) {
            System.err.println("produce-kv: " + failed.get() + " records failed; first error: " + firstError.get());
            return 1;
        }
        return 0;
    }

    /** Writes every record of partition 0, from the log start to the end offset seen at start: offset key value. */
    private static int dump(Map<String, String> args) throws Exception {
        TopicPartition tp = new TopicPartition(need(args, "topic"), 0);
        long deadline = System.nanoTime() + (long) (Double.parseDouble(need(args, "timeout-s")) * 1e9);
        Properties props = clientProps(args);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
                BufferedWriter out = Files.newBufferedWriter(Path.of(need(args, "out")), StandardCharsets.US_ASCII)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            // The position passes gaps and emptied batches, so it reaches the end offset.
            while (consumer.position(tp) < end) {
                if (System.nanoTime() > deadline) {
                    System.err.println("dump: timed out at " + consumer.position(tp) + " of " + end);
                    return 3;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    out.write(r.offset() + " " + hexOrDash(r.key()) + " " + hexOrDash(r.value()) + "\n");
                }
            }
        }
        return 0;
    }

    private record Line(int partition, long offset, String text) {}

    private static String hexOrDash(byte[] b) {
        return b == null ? "-" : HEX.formatHex(b);
    }

    private static int consume(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        int partitions = Integer.parseInt(need(args, "partitions"));
        long expect = Long.parseLong(need(args, "expect"));
        long deadline = System.nanoTime() + (long) (Double.parseDouble(need(args, "timeout-s")) * 1e9);
        Properties props = clientProps(args);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        List<Line> lines = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            while (lines.size() < expect && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    StringBuilder hs = new StringBuilder();
                    for (Header h : r.headers()) {
                        if (hs.length() > 0) {
                            hs.append(',');
                        }
                        hs.append(HEX.formatHex(h.key().getBytes(StandardCharsets.UTF_8)))
                                .append(':')
                                .append(hexOrDash(h.value()));
                    }
                    String text = r.partition() + " " + r.offset() + " " + r.timestamp() + " " + hexOrDash(r.key())
                            + " " + hexOrDash(r.value()) + " " + (hs.length() == 0 ? "-" : hs.toString());
                    lines.add(new Line(r.partition(), r.offset(), text));
                }
            }
        }
        lines.sort(Comparator.comparingInt(Line::partition).thenComparingLong(Line::offset));
        try (BufferedWriter out = Files.newBufferedWriter(Path.of(need(args, "out")), StandardCharsets.US_ASCII)) {
            for (Line l : lines) {
                out.write(l.text());
                out.write('\n');
            }
        }
        if (lines.size() < expect) {
            System.err.println("consume: timed out with " + lines.size() + " of " + expect + " records");
            return 3;
        }
        return 0;
    }
}
