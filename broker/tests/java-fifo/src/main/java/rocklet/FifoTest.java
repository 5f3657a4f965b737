package rocklet;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * The official RocketMQ 5 Java client, unmodified, against a FIFO group of the rocklet
 * broker. Usage: {@code FifoTest <rocklet binary> <scratch dir> [order] [retry] [crash]}.
 *
 * <ul>
 *   <li>order: two push consumers of one FIFO group (one with the FIFO consume accelerator),
 *       5 message groups x 100 messages: each group is consumed in send order, exactly once,
 *       and never two messages of one group at the same time.
 *   <li>retry: a listener that fails message k of a group gets k again (attempts 1 to 4, the
 *       client retrying in place after 1, 2 and 4 s while the broker keeps k invisible past
 *       its 3 s invisible time) before k+1; after the last attempt k is in
 *       %DLQ%&lt;group&gt; and k+1 follows.
 *   <li>crash: the broker is killed with SIGKILL and restarted three times while two push
 *       consumers work through 5 groups x 200 messages: every message is consumed, in order
 *       per group, a message is consumed again only right after itself, and never two of a
 *       group at once.
 * </ul>
 *
 * <p>Exits 0 when every scenario passed, 1 otherwise (with the broker's log).
 */
public final class FifoTest {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: FifoTest <rocklet binary> <scratch dir> [order] [retry] [crash]");
            System.exit(2);
        }
        String bin = args[0];
        Path work = Path.of(args[1]);
        List<String> scenarios = args.length > 2
            ? List.of(args).subList(2, args.length)
            : List.of("order", "retry", "crash");
        boolean ok = true;
        for (String s : scenarios) {
            Path dir = work.resolve(s);
            Files.createDirectories(dir);
            long t0 = System.nanoTime();
            Broker broker = null;
            try {
                switch (s) {
                    case "order":
                        broker = new Broker(bin, dir, "");
                        order(broker);
                        break;
                    case "retry":
                        // Retries after 1, 2 and 4 s hold k for 7 s, past two invisible times.
                        broker = new Broker(bin, dir, "max_delivery_attempts = 4\ndefault_invisible_ms = 3000\n");
                        retry(broker);
                        break;
                    case "crash":
                        broker = new Broker(bin, dir, "default_invisible_ms = 10000\n");
                        crash(broker);
                        break;
                    default:
                        throw new IllegalArgumentException("unknown scenario " + s);
                }
                System.out.printf("PASS %s (%.1f s)%n", s, (System.nanoTime() - t0) / 1e9);
            } catch (Throwable e) {
                ok = false;
                System.out.printf("FAIL %s (%.1f s): %s%n", s, (System.nanoTime() - t0) / 1e9, e);
                e.printStackTrace(System.out);
                if (broker != null) {
                    System.out.println("---- last lines of the broker's log " + broker.log);
                    System.out.println(broker.tail(60));
                }
            } finally {
                if (broker != null) {
                    broker.close();
                }
            }
        }
        // Client threads are not daemons.
        System.exit(ok ? 0 : 1);
    }

    static void order(Broker broker) throws Exception {
        String topic = "JavaFifoOrder";
        String group = "JavaFifoOrderGroup";
        broker.admin("group", group, "--fifo");
        Record rec = new Record();
        try (PushConsumer a = consumer(broker, topic, group, rec.listener("a", m -> false, 2), false);
             PushConsumer b = consumer(broker, topic, group, rec.listener("b", m -> false, 2), true)) {
            long t = System.nanoTime();
            produce(broker, topic, 5, 100);
            System.out.printf("  produced in %.1f s%n", (System.nanoTime() - t) / 1e9);
            rec.awaitDistinct(500, Duration.ofSeconds(120));
            System.out.printf("  consumed in %.1f s%n", (System.nanoTime() - t) / 1e9);
        }
        rec.verify(5, 100);
        require(rec.total() == 500, "every message exactly once, got " + rec.total() + " deliveries");
        System.out.printf("  consumer a took %d messages, b %d%n", rec.byConsumer("a"), rec.byConsumer("b"));
    }

    static void retry(Broker broker) throws Exception {
        String topic = "JavaFifoRetry";
        String group = "JavaFifoRetryGroup";
        broker.admin("group", group, "--fifo");
        Record rec = new Record();
        int k = 4;
        Predicate<MessageView> poison = m -> body(m).equals("g0-" + k);
        try (PushConsumer a = consumer(broker, topic, group, rec.listener("a", poison, 0), false);
             PushConsumer b = consumer(broker, topic, group, rec.listener("b", poison, 0), false)) {
            produce(broker, topic, 2, 10);
            // Every message but k, which never succeeds.
            rec.awaitDistinct(19, Duration.ofSeconds(60));
        }
        rec.verify(2, 10);
        List<Delivery> g0 = rec.group("g0");
        List<Integer> seqs = new ArrayList<>();
        List<Integer> attempts = new ArrayList<>();
        for (Delivery d : g0) {
            seqs.add(d.seq);
            if (d.seq == k) {
                attempts.add(d.attempt);
            }
        }
        require(seqs.equals(List.of(0, 1, 2, 3, 4, 4, 4, 4, 5, 6, 7, 8, 9)),
            "k = 4 four times before k + 1, got " + seqs);
        require(attempts.equals(List.of(1, 2, 3, 4)), "attempts of k: " + attempts);
        // k is in the dead-letter queue, once.
        String dlq = "%DLQ%" + group;
        try (SimpleConsumer reader = PROVIDER.newSimpleConsumerBuilder()
            .setClientConfiguration(broker.clientConfiguration())
            .setConsumerGroup("JavaFifoDlqReader")
            .setSubscriptionExpressions(Map.of(dlq, FilterExpression.SUB_ALL))
            .setAwaitDuration(Duration.ofSeconds(2))
            .build()) {
            List<String> dead = new ArrayList<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (dead.isEmpty() && System.nanoTime() < deadline) {
                for (MessageView m : reader.receive(16, Duration.ofSeconds(30))) {
                    dead.add(body(m));
                    reader.ack(m);
                }
            }
            for (MessageView m : reader.receive(16, Duration.ofSeconds(30))) {
                dead.add(body(m));
            }
            require(dead.equals(List.of("g0-" + k)), dlq + " holds " + dead);
        }
    }

    static void crash(Broker broker) throws Exception {
        String topic = "JavaFifoCrash";
        String group = "JavaFifoCrashGroup";
        broker.admin("group", group, "--fifo");
        int groups = 5;
        int perGroup = 200;
        produce(broker, topic, groups, perGroup);
        long seed = Long.getLong("rocklet.seed", System.nanoTime());
        System.out.println("  seed " + seed + " (-Drocklet.seed to replay)");
        Random random = new Random(seed);
        Record rec = new Record();
        int kills = 0;
        try (PushConsumer a = consumer(broker, topic, group, rec.listener("a", m -> false, 20), false);
             PushConsumer b = consumer(broker, topic, group, rec.listener("b", m -> false, 20), true)) {
            for (int i = 0; i < 3; i++) {
                Thread.sleep(1000 + random.nextInt(1500));
                if (rec.distinct() >= groups * perGroup) {
                    break;
                }
                System.out.printf("  kill -9 the broker at %d of %d consumed%n", rec.distinct(), groups * perGroup);
                broker.kill9();
                broker.start();
                kills++;
            }
            rec.awaitDistinct(groups * perGroup, Duration.ofSeconds(180));
        }
        require(kills > 0, "the run ended before the first kill");
        rec.verify(groups, perGroup);
        System.out.printf("  %d kills, %d deliveries of %d messages (%d again in place)%n", kills, rec.total(),
            groups * perGroup, rec.total() - groups * perGroup);
    }

    static PushConsumer consumer(Broker broker, String topic, String group, MessageListener listener,
        boolean accelerator) throws Exception {
        return PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(broker.clientConfiguration())
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setEnableFifoConsumeAccelerator(accelerator)
            .setMessageListener(listener)
            .build();
    }

    /** Sends `perGroup` messages of each of `groups` message groups, interleaved, one at a time. */
    static void produce(Broker broker, String topic, int groups, int perGroup) throws Exception {
        try (Producer p = PROVIDER.newProducerBuilder()
            .setClientConfiguration(broker.clientConfiguration())
            .setTopics(topic)
            .build()) {
            for (int seq = 0; seq < perGroup; seq++) {
                for (int g = 0; g < groups; g++) {
                    p.send(PROVIDER.newMessageBuilder()
                        .setTopic(topic)
                        .setMessageGroup("g" + g)
                        .setBody(("g" + g + "-" + seq).getBytes(StandardCharsets.UTF_8))
                        .build());
                }
            }
        }
    }

    static String body(MessageView m) {
        return StandardCharsets.UTF_8.decode(m.getBody()).toString();
    }

    static void require(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    /** One call of a listener. */
    static final class Delivery {
        final String consumer;
        final int seq;
        final int attempt;

        Delivery(String consumer, int seq, int attempt) {
            this.consumer = consumer;
            this.seq = seq;
            this.attempt = attempt;
        }

        @Override
        public String toString() {
            return consumer + ":" + seq + "#" + attempt;
        }
    }

    /** What the listeners saw, per message group, in the order calls began. */
    static final class Record {
        private final Map<String, List<Delivery>> byGroup = new ConcurrentHashMap<>();
        private final Map<String, AtomicInteger> busy = new ConcurrentHashMap<>();
        private final Set<String> seen = ConcurrentHashMap.newKeySet();
        private final List<String> overlaps = Collections.synchronizedList(new ArrayList<>());
        private final AtomicInteger total = new AtomicInteger();

        MessageListener listener(String name, Predicate<MessageView> fail, int sleepMs) {
            return m -> {
                String body = body(m);
                int dash = body.indexOf('-');
                String group = body.substring(0, dash);
                int seq = Integer.parseInt(body.substring(dash + 1));
                if (!group.equals(m.getMessageGroup().orElse(""))) {
                    overlaps.add(body + " arrived with message group " + m.getMessageGroup());
                }
                AtomicInteger b = busy.computeIfAbsent(group, g -> new AtomicInteger());
                if (b.incrementAndGet() != 1) {
                    overlaps.add(name + " began " + body + " while another message of " + group + " was in progress");
                }
                try {
                    byGroup.computeIfAbsent(group, g -> Collections.synchronizedList(new ArrayList<>()))
                        .add(new Delivery(name, seq, m.getDeliveryAttempt()));
                    total.incrementAndGet();
                    if (sleepMs > 0) {
                        Thread.sleep(sleepMs);
                    }
                    if (fail.test(m)) {
                        return ConsumeResult.FAILURE;
                    }
                    seen.add(body);
                    return ConsumeResult.SUCCESS;
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return ConsumeResult.FAILURE;
                } finally {
                    b.decrementAndGet();
                }
            };
        }

        int distinct() {
            return seen.size();
        }

        int total() {
            return total.get();
        }

        long byConsumer(String name) {
            return byGroup.values().stream()
                .mapToLong(l -> {
                    synchronized (l) {
                        return l.stream().filter(d -> d.consumer.equals(name)).count();
                    }
                })
                .sum();
        }

        List<Delivery> group(String g) {
            List<Delivery> l = byGroup.getOrDefault(g, List.of());
            synchronized (l) {
                return new ArrayList<>(l);
            }
        }

        /** Waits until `want` messages were consumed successfully (not counting failures). */
        void awaitDistinct(int want, Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            while (seen.size() < want) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("only " + seen.size() + " of " + want + " messages consumed in "
                        + timeout.toSeconds() + " s");
                }
                Thread.sleep(50);
            }
            // Let redeliveries that are due come in before the consumers close.
            Thread.sleep(1000);
        }

        /**
         * Each group's calls, with a message called again right after itself counted once,
         * are 0, 1, ..., perGroup - 1; no two calls of a group overlapped.
         */
        void verify(int groups, int perGroup) {
            require(overlaps.isEmpty(), "messages of one group consumed at once, or without their group ("
                + overlaps.size() + " times), first: " + overlaps.subList(0, Math.min(5, overlaps.size())));
            require(byGroup.size() == groups, "groups consumed: " + byGroup.keySet());
            for (int g = 0; g < groups; g++) {
                List<Delivery> calls = group("g" + g);
                List<Integer> collapsed = new ArrayList<>();
                for (Delivery d : calls) {
                    if (collapsed.isEmpty() || collapsed.get(collapsed.size() - 1) != d.seq) {
                        collapsed.add(d.seq);
                    }
                }
                for (int i = 0; i < perGroup; i++) {
                    if (collapsed.size() <= i || collapsed.get(i) != i) {
                        throw new AssertionError("group g" + g + " out of order at " + i + ": calls "
                            + calls.subList(Math.max(0, indexOfCall(calls, collapsed, i) - 5),
                            Math.min(calls.size(), indexOfCall(calls, collapsed, i) + 5)));
                    }
                }
                require(collapsed.size() == perGroup, "group g" + g + " consumed again out of place: " + collapsed
                    .subList(perGroup, collapsed.size()));
            }
        }

        private static int indexOfCall(List<Delivery> calls, List<Integer> collapsed, int i) {
            // The call where the i-th distinct step began.
            int step = -1;
            for (int c = 0; c < calls.size(); c++) {
                if (c == 0 || calls.get(c).seq != calls.get(c - 1).seq) {
                    step++;
                }
                if (step == i) {
                    return c;
                }
            }
            return calls.size();
        }
    }

    /** The rocklet binary on a fixed port of 127.0.0.1, its log in the scenario's folder. */
    static final class Broker implements AutoCloseable {
        final String bin;
        final Path dir;
        final Path log;
        final Path config;
        final int port;
        Process process;

        Broker(String bin, Path dir, String core) throws Exception {
            this.bin = bin;
            this.dir = dir;
            this.log = dir.resolve("broker.log");
            this.config = dir.resolve("rocklet.toml");
            this.port = freePort();
            // Short long polls: a push consumer's shutdown waits for its receives to end.
            Files.writeString(config, "max_long_polling_ms = 5000\n[core]\nflush = \"sync\"\n" + core);
            start();
        }

        static int freePort() throws IOException {
            try (ServerSocket s = new ServerSocket(0)) {
                return s.getLocalPort();
            }
        }

        ClientConfiguration clientConfiguration() {
            return ClientConfiguration.newBuilder()
                .setEndpoints("127.0.0.1:" + port)
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(3))
                .build();
        }

        private long serving() throws IOException {
            if (!Files.exists(log)) {
                return 0;
            }
            return Files.readAllLines(log).stream().filter(l -> l.contains("serving RocketMQ 5 gRPC")).count();
        }

        /** Starts it on the same port and data directory and waits until it serves. */
        void start() throws Exception {
            long before = serving();
            ProcessBuilder pb = new ProcessBuilder(bin, "broker", "--listen", "127.0.0.1:" + port,
                "--remoting-listen", "off", "--namesrv-listen", "off",
                "--data-dir", dir.resolve("data").toString(), "--config", config.toString());
            pb.redirectErrorStream(true);
            pb.redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
            pb.environment().put("RUST_LOG", "info");
            process = pb.start();
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (serving() == before) {
                if (!process.isAlive() || System.nanoTime() > deadline) {
                    throw new IllegalStateException("the broker did not start:\n" + tail(30));
                }
                Thread.sleep(20);
            }
        }

        void kill9() throws InterruptedException {
            process.destroyForcibly();
            process.waitFor();
        }

        /** {@code rocklet admin --broker <it> <args>}; fails unless it exits 0. */
        void admin(String... args) throws Exception {
            List<String> cmd = new ArrayList<>(List.of(bin, "admin", "--broker", "127.0.0.1:" + port));
            cmd.addAll(List.of(args));
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            require(p.waitFor() == 0, "rocklet admin " + String.join(" ", args) + ": " + out);
            System.out.print("  " + out);
        }

        String tail(int n) {
            try {
                List<String> lines = Files.readAllLines(log);
                return String.join("\n", lines.subList(Math.max(0, lines.size() - n), lines.size()));
            } catch (IOException e) {
                return "(no log: " + e + ")";
            }
        }

        @Override
        public void close() throws Exception {
            if (process != null && process.isAlive()) {
                process.destroy();
                if (!process.waitFor(30, java.util.concurrent.TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                }
            }
        }
    }
}
