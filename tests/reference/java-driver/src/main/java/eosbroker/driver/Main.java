package eosbroker.driver;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Runs one capability scenario with the Java client against a broker and prints one JSON
 * line with what it saw. Usage: Main SCENARIO BOOTSTRAP NAME [ADMIN_URL], where NAME prefixes
 * the topics, transactional ids and groups the scenario creates. The scenario-* ones run the
 * client side of an eosbroker catalogue scenario (docs/scenarios/), with the transactional
 * and client ids the scenario file names; scenario-zombie-fencing and cluster-failover take
 * eosbroker's control API URL as a fourth argument, share-lock-expiry optionally (to move
 * eosbroker's clock past the lock instead of waiting).
 */
public final class Main {
    private static final Duration READ_TIMEOUT = Duration.ofSeconds(60);
    /** group.protocol of the scenario's group consumers: "classic", or "consumer" (KIP-848). */
    private static String groupProtocol = "classic";

    public static void main(String[] args) throws Exception {
        String scenario = args[0];
        String bootstrap = args[1];
        String name = args[2];
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("scenario", scenario);
        switch (scenario) {
            case "plain" -> plain(bootstrap, name, out, false);
            case "idempotent" -> plain(bootstrap, name, out, true);
            case "transactional" -> transactional(bootstrap, name, out);
            case "fencing" -> fencing(bootstrap, name, out);
            case "init-transactions" -> initTransactions(bootstrap, name, out);
            case "ctp" -> consumeTransformProduce(bootstrap, name, out);
            case "ctp-consumer-protocol" -> {
                groupProtocol = "consumer";
                consumeTransformProduce(bootstrap, name, out);
            }
            case "consumer-protocol-group" -> consumerProtocolGroup(bootstrap, name, out);
            case "admin" -> admin(bootstrap, name, out);
            case "admin-configs" -> adminConfigs(bootstrap, name, out);
            case "mixed-protocol-group" -> mixedProtocolGroup(bootstrap, name, out);
            case "scenario-zombie-fencing" -> scenarioZombieFencing(bootstrap, name, args[3], out);
            case "scenario-transaction-timeout" -> scenarioTransactionTimeout(bootstrap, name, out);
            case "scenario-delayed-end-txn" -> scenarioDelayedEndTxn(bootstrap, name, args[3], out);
            case "cluster-failover" -> clusterFailover(bootstrap, name, args[3], out);
            case "share-acknowledgements" -> shareAcknowledgements(bootstrap, name, out);
            case "share-read-committed" -> shareReadCommitted(bootstrap, name, out);
            case "share-consumer-dies" -> shareConsumerDies(bootstrap, name, out);
            case "share-dying-consumer" -> shareDyingConsumer(bootstrap, args[3], args[4]);
            case "share-lock-expiry" -> shareLockExpiry(bootstrap, name, args.length > 3 ? args[3] : null, out);
            case "secured-round-trip" -> securedRoundTrip(bootstrap, name, args[3], args[4], args[5],
                    Integer.parseInt(args[6]), Long.parseLong(args[7]), out);
            case "produce-one" -> produceOne(bootstrap, args[3], out);
            default -> throw new IllegalArgumentException("unknown scenario " + scenario);
        }
        System.out.println(toJson(out));
    }

    // ---------------------------------------------------------------------------------

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        // a secured listener's client settings (security.protocol, sasl.*), from a properties file
        String settings = System.getenv("DRIVER_CLIENT_PROPERTIES");
        if (settings != null) {
            try (java.io.FileInputStream in = new java.io.FileInputStream(settings)) {
                p.load(in);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, Map<String, Object> extra) {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group, boolean committed) {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, committed ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
        }
        return new KafkaConsumer<>(p);
    }

    static void createTopics(String bootstrap, int partitions, String... topics) throws Exception {
        Properties p = common(bootstrap);
        try (Admin admin = Admin.create(p)) {
            List<NewTopic> news = new ArrayList<>();
            for (String t : topics) {
                news.add(new NewTopic(t, partitions, (short) 1));
            }
            admin.createTopics(news).all().get();
        }
    }

    /** Every value of `topic` up to its end offsets, read with the given isolation. */
    static List<String> readAll(String bootstrap, String topic, int partitions, boolean committed) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap, null, committed)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                tps.add(new TopicPartition(topic, i));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            List<String> values = new ArrayList<>();
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            while (System.nanoTime() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    values.add(r.value());
                }
            }
            Collections.sort(values);
            return values;
        }
    }

    // ---------------------------------------------------------------------------------

    static void plain(String bootstrap, String name, Map<String, Object> out, boolean idempotent) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 2, topic);
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(idempotent));
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer(bootstrap, extra)) {
            for (int i = 0; i < 20; i++) {
                RecordMetadata md = p.send(new ProducerRecord<>(topic, i % 2, "k" + i, "v" + i)).get();
                if (md.partition() == 0) {
                    offsets.add(md.offset());
                }
            }
        }
        out.put("partition0_offsets", offsets);
        out.put("values", readAll(bootstrap, topic, 2, false));
    }

    static void transactional(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 2, topic);
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-txn");
        try (KafkaProducer<String, String> p = producer(bootstrap, extra)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 6; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, null, "committed-" + i));
            }
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 6; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, null, "aborted-" + i));
            }
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, "committed-last"));
            p.commitTransaction();
        }
        // Transaction version 2 bumps the epoch at the end of each of the three transactions.
        try (Admin admin = Admin.create(common(bootstrap))) {
            TransactionDescription d = admin.describeTransactions(List.of(name + "-txn")).all().get().get(name + "-txn");
            out.put("epoch_after_three_transactions", (int) d.producerEpoch());
        }
        out.put("read_committed", readAll(bootstrap, topic, 2, true));
        out.put("read_uncommitted_count", readAll(bootstrap, topic, 2, false).size());
    }

    /**
     * As the writer (the DRIVER_CLIENT_PROPERTIES user): TRANSACTIONS transactions of three
     * records into TOPIC under transactional id NAME, PAUSE_MS apart on one producer; then as the
     * reader (the settings of READER_PROPERTIES on top), the records read back read_committed
     * in GROUP. Reports what was read and the writer's re-authentication and connection counts
     * (KIP-368 on a long-lived connection), or the exception the first failing call threw.
     */
    static void securedRoundTrip(String bootstrap, String name, String topic, String group, String readerProperties,
                                 int transactions, long pauseMs, Map<String, Object> out) throws Exception {
        List<String> values = new ArrayList<>();
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name);
        extra.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        try (KafkaProducer<String, String> p = producer(bootstrap, extra)) {
            p.initTransactions();
            for (int t = 0; t < transactions; t++) {
                if (t > 0) {
                    Thread.sleep(pauseMs);
                }
                p.beginTransaction();
                for (int i = 0; i < 3; i++) {
                    String value = name + "-" + t + "-" + i;
                    values.add(value);
                    p.send(new ProducerRecord<>(topic, null, value));
                }
                p.commitTransaction();
            }
            out.put("successful_reauthentications", metricTotal(p.metrics(), "successful-reauthentication-total"));
            out.put("connections_created", metricTotal(p.metrics(), "connection-creation-total"));
        } catch (KafkaException e) {
            out.put("error", failure(e));
            return;
        }
        Properties reader = common(bootstrap);
        try (java.io.FileInputStream in = new java.io.FileInputStream(readerProperties)) {
            reader.load(in);
        }
        reader.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        reader.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        reader.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        reader.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        reader.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        reader.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(reader)) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            while (read.size() < values.size() && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (values.contains(r.value())) {
                        read.add(r.value());
                    }
                }
            }
        }
        Collections.sort(read);
        out.put("read", read);
    }

    static double metricTotal(Map<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> metrics,
                              String name) {
        double total = 0;
        for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> e
                : metrics.entrySet()) {
            if (e.getKey().name().equals(name) && e.getValue().metricValue() instanceof Double d) {
                total += d;
            }
        }
        return total;
    }

    /** One record into TOPIC with the producer's defaults: the exception it failed with, if any. */
    static void produceOne(String bootstrap, String topic, Map<String, Object> out) {
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        extra.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        extra.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        try (KafkaProducer<String, String> p = producer(bootstrap, extra)) {
            p.send(new ProducerRecord<>(topic, null, "one")).get();
            out.put("error", null);
        } catch (Exception e) {
            Throwable cause = e;
            while ((cause instanceof java.util.concurrent.ExecutionException
                    || cause.getClass() == KafkaException.class) && cause.getCause() != null) {
                cause = cause.getCause();
            }
            out.put("error", cause.getClass().getSimpleName());
            out.put("message", cause.getMessage());
        }
    }

    /** initTransactions for transactional id NAME alone: the exception it failed with, if any. */
    static void initTransactions(String bootstrap, String name, Map<String, Object> out) {
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name);
        extra.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        try (KafkaProducer<String, String> p = producer(bootstrap, extra)) {
            p.initTransactions();
            out.put("error", null);
        } catch (KafkaException e) {
            Throwable cause = e;
            while (cause.getClass() == KafkaException.class && cause.getCause() != null) {
                cause = cause.getCause();
            }
            out.put("error", cause.getClass().getSimpleName());
            out.put("message", cause.getMessage());
        }
    }

    static void fencing(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 1, topic);
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-txn");
        KafkaProducer<String, String> zombie = producer(bootstrap, extra);
        zombie.initTransactions();
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(topic, 0, null, "zombie")).get();
        try (KafkaProducer<String, String> successor = producer(bootstrap, extra)) {
            successor.initTransactions();  // fences the zombie and aborts its transaction
            String zombieResult;
            try {
                zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-2")).get();
                zombie.commitTransaction();
                zombieResult = "committed";
            } catch (ProducerFencedException e) {
                zombieResult = "ProducerFencedException";
            } catch (Exception e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                zombieResult = cause.getClass().getSimpleName();
            } finally {
                zombie.close(Duration.ofSeconds(5));
            }
            out.put("zombie", zombieResult);
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(topic, 0, null, "successor"));
            successor.commitTransaction();
        }
        out.put("read_committed", readAll(bootstrap, topic, 1, true));
    }

    /** The exception a call failed with, unwrapped from ExecutionException/KafkaException. */
    static String failure(Exception e) {
        Throwable cause = e;
        while ((cause instanceof java.util.concurrent.ExecutionException
                || cause.getClass() == KafkaException.class) && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause.getClass().getSimpleName();
    }

    /** Polls GET /faults until every rule fired once: the zombie's Produce is being held. */
    static void awaitFaultFired(String admin) throws Exception {
        java.net.http.HttpClient http = java.net.http.HttpClient.newHttpClient();
        java.net.http.HttpRequest get = java.net.http.HttpRequest.newBuilder(java.net.URI.create(admin + "/faults")).build();
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < deadline) {
            String body = http.send(get, java.net.http.HttpResponse.BodyHandlers.ofString()).body();
            if (body.contains("\"fired\": 1") || body.contains("\"fired\":1")) {
                return;
            }
            Thread.sleep(50);
        }
        throw new IllegalStateException("the zombie's Produce was never held: " + admin);
    }

    static void scenarioZombieFencing(String bootstrap, String name, String admin, Map<String, Object> out)
            throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 1, topic);
        Map<String, Object> zombieConfig = new HashMap<>();
        zombieConfig.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "zombie-app");
        zombieConfig.put(ProducerConfig.CLIENT_ID_CONFIG, "zombie");
        KafkaProducer<String, String> zombie = producer(bootstrap, zombieConfig);
        zombie.initTransactions();
        zombie.beginTransaction();
        java.util.concurrent.Future<RecordMetadata> held = zombie.send(new ProducerRecord<>(topic, 0, null, "zombie"));
        awaitFaultFired(admin);
        Map<String, Object> successorConfig = new HashMap<>(zombieConfig);
        successorConfig.put(ProducerConfig.CLIENT_ID_CONFIG, "successor");
        try (KafkaProducer<String, String> successor = producer(bootstrap, successorConfig)) {
            successor.initTransactions();  // fences the zombie; the scenario then releases its Produce
            try {
                held.get();
                out.put("zombie_send", "acknowledged");
            } catch (Exception e) {
                out.put("zombie_send", failure(e));
            }
            try {
                zombie.commitTransaction();
                out.put("zombie_commit", "committed");
            } catch (Exception e) {
                out.put("zombie_commit", failure(e));
            } finally {
                zombie.close(Duration.ofSeconds(5));
            }
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(topic, 0, null, "successor"));
            successor.commitTransaction();
        }
        out.put("read_committed", readAll(bootstrap, topic, 1, true));
    }

    static void scenarioTransactionTimeout(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 1, topic);
        Map<String, Object> config = new HashMap<>();
        config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "slow-app");
        config.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60000);
        try (KafkaProducer<String, String> producer = producer(bootstrap, config)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "timed-out")).get();  // then the clock jumps 2 minutes
            try {
                producer.commitTransaction();
                out.put("commit", "committed");
            } catch (Exception e) {
                out.put("commit", failure(e));
            }
        }
        try (KafkaProducer<String, String> restarted = producer(bootstrap, config)) {
            restarted.initTransactions();
            restarted.beginTransaction();
            restarted.send(new ProducerRecord<>(topic, 0, null, "after"));
            restarted.commitTransaction();
        }
        out.put("read_committed", readAll(bootstrap, topic, 1, true));
    }

    /**
     * The first EndTxn of "app" is held; the client's retry (after request.timeout.ms) commits.
     * The next transaction writes x; the held EndTxn is released into it; then y, and abort.
     * Transactions v1: the late commit commits x (the abort leaves it readable); v2: fenced.
     */
    static void scenarioDelayedEndTxn(String bootstrap, String name, String admin, Map<String, Object> out)
            throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 2, topic);
        Map<String, Object> config = new HashMap<>();
        config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "app");
        config.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 2000);
        config.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        try (KafkaProducer<String, String> producer = producer(bootstrap, config);
             Admin adminClient = Admin.create(common(bootstrap))) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "t1")).get();
            producer.commitTransaction();  // its EndTxn times out and is sent again
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "x")).get();
            control(admin, "/faults/1/release", "{}");
            // the late EndTxn commits the open transaction (v1) or is fenced (v2: it stays open)
            String state = "";
            for (int i = 0; i < 50 && !state.equals("CompleteCommit"); i++) {
                state = adminClient.describeTransactions(List.of("app")).description("app").get().state().toString();
                Thread.sleep(100);
            }
            out.put("state_after_release", state);
            out.put("read_committed_mid_transaction", readAll(bootstrap, topic, 2, true));
            producer.send(new ProducerRecord<>(topic, 1, null, "y")).get();
            try {
                producer.abortTransaction();
                out.put("abort", "aborted");
            } catch (Exception e) {
                out.put("abort", failure(e));
            }
        }
        out.put("read_committed", readAll(bootstrap, topic, 2, true));
    }

    static void consumeTransformProduce(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String in = name + "-in";
        String outTopic = name + "-out";
        String group = name + "-group";
        createTopics(bootstrap, 2, in, outTopic);
        try (KafkaProducer<String, String> p = producer(bootstrap, Map.of())) {
            for (int i = 0; i < 40; i++) {
                p.send(new ProducerRecord<>(in, i % 2, null, "m" + i));
            }
        }
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-txn");
        int processed = 0;
        int aborted = 0;
        try (KafkaProducer<String, String> p = producer(bootstrap, extra);
             KafkaConsumer<String, String> c = consumer(bootstrap, group, true)) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            int batch = 0;
            while (processed < 40 && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(outTopic, r.partition(), null, r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                if (batch++ == 0) {
                    // The first batch is aborted: its records must be redone and not seen twice.
                    p.abortTransaction();
                    aborted += records.count();
                    for (TopicPartition tp : records.partitions()) {
                        c.seek(tp, records.records(tp).get(0).offset());
                    }
                    continue;
                }
                p.commitTransaction();
                processed += records.count();
            }
        }
        out.put("processed", processed);
        out.put("aborted_then_redone", aborted);
        out.put("output", readAll(bootstrap, outTopic, 2, true));
        try (Admin admin = Admin.create(common(bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<String, Long> byPartition = new java.util.TreeMap<>();
            committed.forEach((tp, om) -> byPartition.put(tp.toString(), om.offset()));
            out.put("committed_offsets", byPartition);
        }
    }

    /** KIP-848: one member gets every partition, a second joins and they split them; the
     *  group as Admin.describeConsumerGroups (ConsumerGroupDescribe) reports it. */
    static void consumerProtocolGroup(String bootstrap, String name, Map<String, Object> out) throws Exception {
        groupProtocol = "consumer";
        String topic = name + "-in";
        String group = name + "-group";
        createTopics(bootstrap, 4, topic);
        try (KafkaConsumer<String, String> first = consumer(bootstrap, group, true);
             KafkaConsumer<String, String> second = consumer(bootstrap, group, true)) {
            first.subscribe(List.of(topic));
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            while (first.assignment().size() < 4 && System.nanoTime() < deadline) {
                first.poll(Duration.ofMillis(100));
            }
            out.put("first_alone", first.assignment().size());
            second.subscribe(List.of(topic));
            while (System.nanoTime() < deadline
                   && !(first.assignment().size() == 2 && second.assignment().size() == 2)) {
                first.poll(Duration.ofMillis(100));
                second.poll(Duration.ofMillis(100));
            }
            Set<TopicPartition> both = new HashSet<>(first.assignment());
            both.addAll(second.assignment());
            out.put("split", List.of(first.assignment().size(), second.assignment().size()));
            out.put("union", both.size());
            try (Admin admin = Admin.create(common(bootstrap))) {
                var described = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                out.put("describe_type", described.type().toString());
                out.put("describe_members", described.members().size());
                int assigned = 0;
                for (var m : described.members()) {
                    assigned += m.assignment().topicPartitions().size();
                }
                out.put("describe_assigned", assigned);
            }
        }
    }

    /** KIP-848 online migration: a classic consumer (JoinGroup) joins a group whose first
     *  member uses group.protocol=consumer; they split the partitions; when the KIP-848
     *  member leaves the group becomes classic and the other takes every partition. */
    static void mixedProtocolGroup(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-in";
        String group = name + "-group";
        createTopics(bootstrap, 4, topic);
        groupProtocol = "consumer";
        KafkaConsumer<String, String> modern = consumer(bootstrap, group, true);
        groupProtocol = "classic";
        try (KafkaConsumer<String, String> classic = consumer(bootstrap, group, true);
             Admin admin = Admin.create(common(bootstrap))) {
            modern.subscribe(List.of(topic));
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            while (modern.assignment().size() < 4 && System.nanoTime() < deadline) {
                modern.poll(Duration.ofMillis(100));
            }
            out.put("modern_alone", modern.assignment().size());
            classic.subscribe(List.of(topic));
            while (System.nanoTime() < deadline
                   && !(modern.assignment().size() == 2 && classic.assignment().size() == 2)) {
                modern.poll(Duration.ofMillis(100));
                classic.poll(Duration.ofMillis(100));
            }
            Set<TopicPartition> both = new HashSet<>(modern.assignment());
            both.addAll(classic.assignment());
            out.put("split", List.of(modern.assignment().size(), classic.assignment().size()));
            out.put("union", both.size());
            out.put("type_mixed", admin.describeConsumerGroups(List.of(group)).all().get().get(group).type().toString());
            modern.close();
            while (classic.assignment().size() < 4 && System.nanoTime() < deadline) {
                classic.poll(Duration.ofMillis(100));
            }
            out.put("classic_alone", classic.assignment().size());
            out.put("type_after", admin.listConsumerGroups().all().get().stream()
                .filter(l -> l.groupId().equals(group)).map(l -> l.type().map(Object::toString).orElse("?"))
                .collect(Collectors.toList()));
        } finally {
            groupProtocol = "classic";
        }
    }

    /** The admin calls client test suites make: configs of a topic and a group (incremental
     *  alter, describe with sources), log dirs, the cluster with authorized operations, SCRAM
     *  credentials, and ACLs (which need an authorizer). */
    static void adminConfigs(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 1, topic);
        try (Admin admin = Admin.create(common(bootstrap))) {
            var t = new org.apache.kafka.common.config.ConfigResource(
                org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic);
            var g = new org.apache.kafka.common.config.ConfigResource(
                org.apache.kafka.common.config.ConfigResource.Type.GROUP, name + "-g");
            var set = org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET;
            admin.incrementalAlterConfigs(Map.of(
                t, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(
                    new org.apache.kafka.clients.admin.ConfigEntry("retention.ms", "3600000"), set)),
                g, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(
                    new org.apache.kafka.clients.admin.ConfigEntry("consumer.session.timeout.ms", "50000"), set))))
                .all().get();
            var configs = admin.describeConfigs(List.of(t, g)).all().get();
            for (String key : List.of("retention.ms", "cleanup.policy", "max.compaction.lag.ms")) {
                var e = configs.get(t).get(key);
                out.put("topic " + key, List.of(e.value(), e.source().toString()));
            }
            for (String key : List.of("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")) {
                var e = configs.get(g).get(key);
                out.put("group " + key, List.of(e.value(), e.source().toString()));
            }
            var cluster = admin.describeCluster(
                new org.apache.kafka.clients.admin.DescribeClusterOptions().includeAuthorizedOperations(true));
            int node = cluster.nodes().get().iterator().next().id();
            out.put("cluster_operations", cluster.authorizedOperations().get().stream()
                .map(Object::toString).sorted().collect(Collectors.toList()));
            var dirs = admin.describeLogDirs(List.of(node)).allDescriptions().get().get(node);
            out.put("log_dir_has_topic", dirs.values().stream()
                .anyMatch(d -> d.replicaInfos().containsKey(new TopicPartition(topic, 0))));
            String user = name + "-user";
            admin.alterUserScramCredentials(List.of(new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(
                user, new org.apache.kafka.clients.admin.ScramCredentialInfo(
                    org.apache.kafka.clients.admin.ScramMechanism.SCRAM_SHA_256, 8192), "secret"))).all().get();
            var scram = admin.describeUserScramCredentials(List.of(user)).all().get().get(user);
            out.put("scram", scram.credentialInfos().stream()
                .map(i -> i.mechanism() + ":" + i.iterations()).collect(Collectors.toList()));
            var acl = new org.apache.kafka.common.acl.AclBinding(
                new org.apache.kafka.common.resource.ResourcePattern(
                    org.apache.kafka.common.resource.ResourceType.TOPIC, topic,
                    org.apache.kafka.common.resource.PatternType.LITERAL),
                new org.apache.kafka.common.acl.AccessControlEntry("User:*", "*",
                    org.apache.kafka.common.acl.AclOperation.READ, org.apache.kafka.common.acl.AclPermissionType.ALLOW));
            try {
                admin.createAcls(List.of(acl)).all().get();
                out.put("create_acls", "ok");
            } catch (java.util.concurrent.ExecutionException e) {
                out.put("create_acls", e.getCause().getClass().getSimpleName());
            }
        }
    }

    static void admin(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 1, topic);
        String txnId = name + "-txn";
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        try (KafkaProducer<String, String> p = producer(bootstrap, extra);
             Admin admin = Admin.create(common(bootstrap))) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, "open")).get();
            TransactionDescription open = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            out.put("describe_open_state", open.state().toString());
            out.put("describe_open_partitions", open.topicPartitions().stream()
                .map(TopicPartition::toString).sorted().collect(Collectors.toList()));
            Collection<TransactionListing> listed = admin.listTransactions().all().get();
            out.put("listed", listed.stream().filter(l -> l.transactionalId().equals(txnId))
                .map(l -> l.state().toString()).collect(Collectors.toList()));
            List<ProducerState> producers = admin.describeProducers(List.of(new TopicPartition(topic, 0)))
                .partitionResult(new TopicPartition(topic, 0)).get().activeProducers();
            out.put("producers_open_txn_start", producers.stream()
                .map(s -> s.currentTransactionStartOffset().orElse(-1L)).collect(Collectors.toList()));
            p.commitTransaction();
            TransactionDescription done = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            String state = done.state().toString();
            for (int i = 0; i < 100 && state.startsWith("Prepare"); i++) {
                Thread.sleep(50);
                state = admin.describeTransactions(List.of(txnId)).description(txnId).get().state().toString();
            }
            out.put("describe_done_state", state);
        }
    }

    // ---------------------------------------------------------------------------------

    /** POSTs to eosbroker's control API; a refusal fails the scenario. */
    static void control(String adminUrl, String path, String jsonBody) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(adminUrl + path))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(jsonBody)).build();
        HttpResponse<String> answer = HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
        if (answer.statusCode() != 200) {
            throw new IllegalStateException("control " + path + ": " + answer.statusCode() + " " + answer.body());
        }
    }

    static int coordinatorOf(Admin admin, String txnId) throws Exception {
        return admin.describeTransactions(List.of(txnId)).description(txnId).get().coordinatorId();
    }

    /**
     * Transactions over three partitions of a topic replicated on three nodes while the
     * transaction coordinator's node is stopped with a transaction open (before EndTxn),
     * then killed after PREPARE_COMMIT is written while its markers are held (during
     * EndTxn); one transaction is aborted. Reports what was committed and what a
     * read_committed reader sees.
     */
    static void clusterFailover(String bootstrap, String name, String adminUrl, Map<String, Object> out)
            throws Exception {
        String topic = name + "-t";
        String txnId = name + "-txn";
        int partitions = 3;
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty()))).all().get();
        }
        Map<String, Object> extra = new HashMap<>();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        extra.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        extra.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        extra.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        extra.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "120000");
        List<String> committed = new ArrayList<>();
        List<Integer> coordinators = new ArrayList<>();
        int stopped = -1;
        try (KafkaProducer<String, String> p = producer(bootstrap, extra);
             Admin admin = Admin.create(common(bootstrap))) {
            p.initTransactions();
            for (int t = 0; t < 8; t++) {
                p.beginTransaction();
                List<String> values = new ArrayList<>();
                for (int part = 0; part < partitions; part++) {
                    String v = "t" + t + "-p" + part;
                    p.send(new ProducerRecord<>(topic, part, null, v));
                    values.add(v);
                }
                p.flush();
                int coordinator = coordinatorOf(admin, txnId);
                coordinators.add(coordinator);
                if (t == 2) {  // before EndTxn: the coordinator's node stops with the transaction open
                    control(adminUrl, "/nodes/" + coordinator + "/stop", "{}");
                    stopped = coordinator;
                } else if (t == 3) {
                    control(adminUrl, "/nodes/" + stopped + "/start", "{}");
                } else if (t == 5) {  // during EndTxn: the coordinator's markers are held on arrival
                    // (a link cut would also keep its followers from fetching the PREPARE_COMMIT:
                    // out of the ISR, they could not take over once it dies, on Kafka either)
                    control(adminUrl, "/faults", "{\"action\": \"hold\", \"api_key\": 27, "
                        + "\"client_id\": \"eosbroker-node-" + coordinator + "\"}");
                }
                if (t == 6) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                    committed.addAll(values);
                }
                if (t == 5) {  // after PREPARE_COMMIT: the node dies, the next coordinator sends the markers
                    control(adminUrl, "/nodes/" + coordinator + "/kill", "{}");
                    control(adminUrl, "/faults/clear", "{}");  // the dead node's held markers never land
                }
            }
        }
        Collections.sort(committed);
        out.put("committed", committed);
        out.put("coordinators", coordinators);
        out.put("read_committed", readAll(bootstrap, topic, partitions, true));
        out.put("read_uncommitted_count", readAll(bootstrap, topic, partitions, false).size());
    }

    // -- share groups (KIP-932) with KafkaShareConsumer --------------------------------

    /** The least share.record.lock.duration.ms Kafka allows (group.share.min.record.lock.duration.ms). */
    static final int LOCK_MS = 15_000;

    /** A share group's configs set (earliest, a lock of LOCK_MS, and `extra`), before any member joins. */
    static void shareGroup(String bootstrap, String group, Map<String, String> extra) throws Exception {
        Map<String, String> configs = new LinkedHashMap<>();
        configs.put("share.auto.offset.reset", "earliest");
        configs.put("share.record.lock.duration.ms", String.valueOf(LOCK_MS));
        configs.putAll(extra);
        var resource = new org.apache.kafka.common.config.ConfigResource(
            org.apache.kafka.common.config.ConfigResource.Type.GROUP, group);
        List<org.apache.kafka.clients.admin.AlterConfigOp> ops = new ArrayList<>();
        configs.forEach((k, v) -> ops.add(new org.apache.kafka.clients.admin.AlterConfigOp(
            new org.apache.kafka.clients.admin.ConfigEntry(k, v),
            org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET)));
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
        }
    }

    static KafkaShareConsumer<String, String> shareConsumer(String bootstrap, String group, String topic,
                                                            boolean explicit) {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, explicit ? "explicit" : "implicit");
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        c.subscribe(List.of(topic));
        return c;
    }

    /** Values sent to partition 0 of `topic` in one batch (one share fetch hands them out together). */
    static void produceBatch(String bootstrap, String topic, String... values) {
        try (KafkaProducer<String, String> p = producer(bootstrap, Map.of(ProducerConfig.LINGER_MS_CONFIG, "50"))) {
            for (String v : values) {
                p.send(new ProducerRecord<>(topic, 0, null, v));
            }
            p.flush();
        }
    }

    /** Records polled until `done(records so far)`; in explicit mode each is acknowledged
     *  with `ack(record)` right away (null: the records of one non-empty poll, unacknowledged). */
    static List<ConsumerRecord<String, String>> sharePoll(
            KafkaShareConsumer<String, String> c, java.util.function.Predicate<List<ConsumerRecord<String, String>>> done,
            java.util.function.Function<ConsumerRecord<String, String>, AcknowledgeType> ack) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
        while (!done.test(got)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("gave up polling, got " + delivered(got));
            }
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                got.add(r);
                if (ack != null) {
                    c.acknowledge(r, ack.apply(r));
                }
            }
        }
        return got;
    }

    static java.util.function.Predicate<List<ConsumerRecord<String, String>>> atLeast(int n) {
        return got -> got.size() >= n;
    }

    static java.util.function.Predicate<List<ConsumerRecord<String, String>>> seen(String value) {
        return got -> got.stream().anyMatch(r -> value.equals(r.value()));
    }

    /** "value:deliveryCount" of each record, in the order delivered. */
    static List<String> delivered(List<ConsumerRecord<String, String>> records) {
        return records.stream().map(r -> r.value() + ":" + r.deliveryCount().map(String::valueOf).orElse("?"))
            .collect(Collectors.toList());
    }

    static List<String> sortedDelivered(List<ConsumerRecord<String, String>> records) {
        List<String> out = delivered(records);
        Collections.sort(out);
        return out;
    }

    /** The exceptions commitSync reported, by simple class name ([] when all were accepted). */
    static List<String> commitErrors(KafkaShareConsumer<String, String> c) {
        return c.commitSync().values().stream().filter(Optional::isPresent)
            .map(e -> e.get().getClass().getSimpleName()).sorted().collect(Collectors.toList());
    }

    /** Implicit acknowledgement (every record once, then not again), explicit accept,
     *  release (back with delivery count 2) and reject (never again), and the delivery-count
     *  limit archiving a record released as often as it allows. */
    static void shareAcknowledgements(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String implicitTopic = name + "-implicit";
        String explicitTopic = name + "-explicit";
        String limitTopic = name + "-limit";
        createTopics(bootstrap, 1, implicitTopic, explicitTopic, limitTopic);

        shareGroup(bootstrap, name + "-implicit", Map.of());
        List<String> ten = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            ten.add("r" + i);
        }
        produceBatch(bootstrap, implicitTopic, ten.toArray(new String[0]));
        try (KafkaShareConsumer<String, String> first = shareConsumer(bootstrap, name + "-implicit", implicitTopic, false)) {
            out.put("implicit_first", sortedDelivered(sharePoll(first, atLeast(10), null)));
            out.put("implicit_commit_errors", commitErrors(first));
            out.put("acquisition_lock_timeout_ms", first.acquisitionLockTimeoutMs().orElse(-1));
        }
        produceBatch(bootstrap, implicitTopic, "after");
        try (KafkaShareConsumer<String, String> second = shareConsumer(bootstrap, name + "-implicit", implicitTopic, false)) {
            out.put("implicit_second", delivered(sharePoll(second, seen("after"), null)));
            second.commitSync();
        }

        shareGroup(bootstrap, name + "-explicit", Map.of());
        Map<String, AcknowledgeType> kinds = Map.of("accept", AcknowledgeType.ACCEPT, "release", AcknowledgeType.RELEASE,
                                                    "reject", AcknowledgeType.REJECT, "end", AcknowledgeType.ACCEPT);
        produceBatch(bootstrap, explicitTopic, "accept", "release", "reject");
        try (KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, name + "-explicit", explicitTopic, true)) {
            out.put("explicit_first", delivered(sharePoll(c, atLeast(3), r -> kinds.get(r.value()))));
            out.put("explicit_commit_errors", commitErrors(c));
            produceBatch(bootstrap, explicitTopic, "end");
            out.put("explicit_again", sortedDelivered(sharePoll(c, seen("end"), r -> kinds.get(r.value()))));
            out.put("explicit_again_commit_errors", commitErrors(c));
        }

        shareGroup(bootstrap, name + "-limit", Map.of("share.delivery.count.limit", "2"));
        produceBatch(bootstrap, limitTopic, "poison");
        try (KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, name + "-limit", limitTopic, true)) {
            List<String> released = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                released.addAll(delivered(sharePoll(c, atLeast(1), r -> AcknowledgeType.RELEASE)));
                c.commitSync();
            }
            out.put("limit_released", released);
            produceBatch(bootstrap, limitTopic, "next");
            out.put("limit_after", delivered(sharePoll(c, seen("next"), r -> AcknowledgeType.ACCEPT)));
            c.commitSync();
        }
    }

    /** share.isolation.level read_committed: committed records only, never an aborted one,
     *  nothing past the LSO while a transaction is open; read_uncommitted: everything. */
    static void shareReadCommitted(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        createTopics(bootstrap, 1, topic);
        shareGroup(bootstrap, name + "-committed", Map.of("share.isolation.level", "read_committed"));
        shareGroup(bootstrap, name + "-uncommitted", Map.of("share.isolation.level", "read_uncommitted"));
        try (KafkaProducer<String, String> txn = producer(bootstrap,
                Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-txn"))) {
            txn.initTransactions();
            for (String v : List.of("c1", "a1", "c2", "a2")) {
                txn.beginTransaction();
                txn.send(new ProducerRecord<>(topic, 0, null, v));
                txn.flush();
                if (v.startsWith("c")) {
                    txn.commitTransaction();
                } else {
                    txn.abortTransaction();
                }
            }
            txn.beginTransaction();
            txn.send(new ProducerRecord<>(topic, 0, null, "open"));
            txn.flush();
            produceBatch(bootstrap, topic, "after-open");  // past the LSO until the transaction ends
            try (KafkaShareConsumer<String, String> reader = shareConsumer(bootstrap, name + "-committed", topic, false)) {
                List<ConsumerRecord<String, String>> seen = sharePoll(reader, seen("c2"), null);
                for (ConsumerRecord<String, String> r : reader.poll(Duration.ofSeconds(2))) {
                    seen.add(r);  // one more fetch: what lies past the LSO stays there
                }
                out.put("committed_while_open", delivered(seen));
                txn.commitTransaction();
                seen.addAll(sharePoll(reader, seen("after-open"), null));
                out.put("committed_after_commit", delivered(seen));
                reader.commitSync();
            }
        }
        try (KafkaShareConsumer<String, String> everything = shareConsumer(bootstrap, name + "-uncommitted", topic, false)) {
            out.put("uncommitted", delivered(sharePoll(everything, seen("after-open"), null)));
            everything.commitSync();
        }
    }

    /** The child JVM of share-consumer-dies: takes one poll's records of `topic` without
     *  acknowledging them, prints how many, and halts (no close, no leave). */
    static void shareDyingConsumer(String bootstrap, String group, String topic) {
        KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, topic, true);
        int got = sharePoll(c, atLeast(1), null).size();
        System.out.println(got);
        System.out.flush();
        Runtime.getRuntime().halt(9);
    }

    /** A consumer killed with records in hand (a JVM halted): its connection closes and
     *  another member gets them, delivered a second time, before any lock expires. */
    static void shareConsumerDies(String bootstrap, String name, Map<String, Object> out) throws Exception {
        String topic = name + "-t";
        String group = name + "-g";
        createTopics(bootstrap, 1, topic);
        shareGroup(bootstrap, group, Map.of("share.record.lock.duration.ms", "60000"));
        produceBatch(bootstrap, topic, "x0", "x1", "x2", "x3", "x4");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process dying = new ProcessBuilder(java, "-Xmx128m", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", System.getProperty("java.class.path"),
            Main.class.getName(), "share-dying-consumer", bootstrap, name, group, topic)
            .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String printed = new String(dying.getInputStream().readAllBytes()).trim();
        out.put("dying_exit", dying.waitFor());
        out.put("dying_got", printed);
        try (KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, topic, true)) {
            out.put("redelivered", delivered(sharePoll(c, atLeast(5), r -> AcknowledgeType.ACCEPT)));
            out.put("commit_errors", commitErrors(c));
        }
    }

    /** Records a member holds without acknowledging go to another member once the lock
     *  ends (eosbroker's clock moved by the control API at `adminUrl`; else the time
     *  passes); the first member's late acknowledgement then changes nothing. */
    static void shareLockExpiry(String bootstrap, String name, String adminUrl, Map<String, Object> out)
            throws Exception {
        String topic = name + "-t";
        String group = name + "-g";
        createTopics(bootstrap, 1, topic);
        shareGroup(bootstrap, group, Map.of());
        produceBatch(bootstrap, topic, "a", "b");
        try (KafkaShareConsumer<String, String> slow = shareConsumer(bootstrap, group, topic, true);
             KafkaShareConsumer<String, String> other = shareConsumer(bootstrap, group, topic, true)) {
            List<ConsumerRecord<String, String>> held = sharePoll(slow, atLeast(1), null);
            out.put("held", delivered(held));
            if (adminUrl != null) {
                control(adminUrl, "/clock/advance", "{\"by\": \"" + (LOCK_MS + 1000) + "ms\"}");
            } else {
                Thread.sleep(LOCK_MS + 1000);
            }
            out.put("redelivered", delivered(sharePoll(other, atLeast(2), r -> AcknowledgeType.ACCEPT)));
            out.put("redelivered_commit_errors", commitErrors(other));
            for (ConsumerRecord<String, String> r : held) {
                slow.acknowledge(r, AcknowledgeType.RELEASE);
            }
            out.put("late_commit_errors", commitErrors(slow));
            produceBatch(bootstrap, topic, "end");
            out.put("after", delivered(sharePoll(other, seen("end"), r -> AcknowledgeType.ACCEPT)));
            other.commitSync();
        }
    }

    // ---------------------------------------------------------------------------------

    static String toJson(Object o) {
        if (o == null) {
            return "null";
        }
        if (o instanceof String s) {
            return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        }
        if (o instanceof Number || o instanceof Boolean) {
            return o.toString();
        }
        if (o instanceof Map<?, ?> m) {
            return m.entrySet().stream().map(e -> toJson(String.valueOf(e.getKey())) + ":" + toJson(e.getValue()))
                .collect(Collectors.joining(",", "{", "}"));
        }
        if (o instanceof Collection<?> c) {
            return c.stream().map(Main::toJson).collect(Collectors.joining(",", "[", "]"));
        }
        throw new KafkaException("cannot print " + o.getClass());
    }
}
