package eosbroker.streams;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * An exactly_once_v2 Kafka Streams application for the streams-group tests:
 *   input --(each record, slowed down)--> copy
 *   input --(rekeyed by value mod 5: a repartition topic)--> count (a changelog) --> counts
 * Arguments: bootstrap, application id, input, copy, counts, state dir, group.protocol,
 * per-record delay in ms. It prints its state changes and runs until killed; a fatal
 * error prints FAILED and exits 1.
 */
public final class Main {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], copy = args[3], counts = args[4];
        String stateDir = args[5], protocol = args[6];
        long delayMs = Long.parseLong(args[7]);

        StreamsBuilder builder = new StreamsBuilder();
        var source = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        source.peek((k, v) -> pause(delayMs)).to(copy, Produced.with(Serdes.String(), Serdes.String()));
        source.selectKey((k, v) -> "k" + (Long.parseLong(v) % 5))
              .groupByKey(Grouped.with("regroup", Serdes.String(), Serdes.String()))
              .count(Materialized.as("counts"))
              .toStream()
              .mapValues(c -> Long.toString(c))
              .to(counts, Produced.with(Serdes.String(), Serdes.String()));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);  // every count is sent on
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        if (protocol.equals("classic")) {
            // a killed instance's members leave the group within seconds (the streams
            // protocol takes its session timeout from the group's config instead)
            props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
            props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        }

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> System.out.println("STATE " + before + " -> " + now));
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("FAILED " + e);
            e.printStackTrace(System.out);
            failed.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        failed.await();
        streams.close(java.time.Duration.ofSeconds(5));
        System.exit(1);
    }

    private static void pause(long ms) {
        if (ms <= 0) return;
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
