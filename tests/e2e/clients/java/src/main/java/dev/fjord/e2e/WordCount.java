package dev.fjord.e2e;

import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams word count with exactly_once_v2, for the e2e suite: lines from an input topic are split into
 * words, re-keyed by word (a repartition topic), counted in a state store (a changelog topic) and every new count
 * is written to an output topic. With the record cache off, each count of a word is emitted once, so a reader of
 * the output (read_committed) must see 1, 2, 3, ... per word, through crashes of this process.
 *
 * <p>Arguments: bootstrap servers, application id, input topic, output topic, state directory, and optionally the
 * replication factor of the internal topics (default 1). Runs until killed; prints each state change of the Streams
 * client.
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 5 && args.length != 6) {
            System.err.println("usage: WordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [REPLICATION_FACTOR]");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, args.length == 6 ? Integer.parseInt(args[5]) : 1);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .flatMap((key, line) -> Arrays.stream(line.split(" "))
                        .filter(word -> !word.isEmpty())
                        .map(word -> KeyValue.pair(word, word))
                        .toList())
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as(Stores.inMemoryKeyValueStore("word-counts")))
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        stopped.await();
        System.exit(1);
    }
}
