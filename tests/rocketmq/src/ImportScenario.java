// The import check's clients (Java v4 client, rocketmq-client 5.5.0); run by tests/ci/import.sh.
//
//   java ImportScenario produce <namesrv> [<key prefix>]
//       Against Apache RocketMQ: normal messages on 4 queues, a batch, a 100 KiB body (the
//       client compresses it), delay levels 1 (delivered) and 4 (still waiting when the broker
//       stops), timers of 2 s (delivered) and 40 s (waiting), transactions committed, rolled
//       back and left unknown (checked meanwhile), and consumer offsets of group ImpGroup
//       (3 in each queue of ImpNormal; 5 past what the queue held before with a key prefix).
//       With a key prefix (the export round trip, against rocklet) every key starts with it.
//   java ImportScenario consume <namesrv> <out.jsonl> [<key prefix>]
//       What group ImpGroup gets from its committed offsets on, while a producer of the
//       pending transaction's group answers its check (commit): waits for the delayed
//       messages and the pending transaction, then writes every message as one line, sorted.
//       Run against Apache RocketMQ restarted on a copy of the store and against rocklet on
//       the imported data directory, the two files must be equal.
//   java ImportScenario golden-produce <namesrv> <topic>
//       Normal messages, a batch and 100 KiB bodies to one topic (for the reverse golden check).
//   java ImportScenario dump <namesrv> <group> <out.jsonl> <topic>...
//       Every message of the topics from queue offset 0, one line each, sorted.
//
// A line holds what a consumer is given: topic, queue, queue offset, message id (UNIQ_KEY),
// tags, keys, flag, reconsume times, born time and host, store time, body (length and
// SHA-256) and the properties, except those the brokers write for their own bookkeeping
// and that differ by design (EXCLUDED). The store time is left out for messages that become
// visible only after the restart (a delayed message's or a checked transaction's time is
// the moment it became visible there).
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.topic.TopicValidator;

public class ImportScenario {
    static final String NORMAL = "ImpNormal";
    static final String DELAY = "ImpDelay";
    static final String TXN = "ImpTxn";
    static final String GROUP = "ImpGroup";
    static final String TXN_GROUP = "ImpTxnGroup";
    /** Keys of the messages that become visible only after the restart (with the key prefix). */
    static Set<String> LATER = new HashSet<>(Arrays.asList("delay-level-4", "timer-40s", "pending-1"));
    /** Prefix of every key the scenario writes (empty but for the export round trip). */
    static String P = "";

    static void prefix(String[] a, int at) {
        if (a.length > at) {
            P = a[at];
            Set<String> later = new HashSet<>();
            for (String k : LATER) {
                later.add(P + k);
            }
            LATER = later;
        }
    }
    /** Broker bookkeeping: differs by design between RocketMQ and rocklet (broker/README.md, import). */
    static final Set<String> EXCLUDED = new HashSet<>(Arrays.asList(
        "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
        "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TRANSACTION_CHECK_TIMES", "__CRC32#", "__BATCH_LEN",
        "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME"));

    public static void main(String[] a) {
        try {
            run(a);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    static void run(String[] a) throws Exception {
        switch (a[0]) {
            case "produce":
                prefix(a, 2);
                produce(a[1]);
                break;
            case "consume":
                prefix(a, 3);
                consume(a[1], a[2]);
                break;
            case "golden-produce":
                goldenProduce(a[1], a[2]);
                break;
            case "dump":
                dump(a[1], a[2], a[3], Arrays.copyOfRange(a, 4, a.length));
                break;
            default:
                throw new IllegalArgumentException("produce | consume | golden-produce | dump");
        }
    }

    static void ok(SendResult r, String what) {
        if (r.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException(what + ": " + r);
        }
    }

    /** Queue `id` of `topic`, which is created (4 queues, as auto-creation would) if it does not exist. */
    static MessageQueue queue(DefaultMQProducer p, String topic, int id) throws Exception {
        // A broker that just booted may not be registered with the name server yet (under
        // load its first registration can miss; the next comes 30 s later): until then
        // creating the topic fails too, so both are retried for up to 40 s.
        boolean created = false;
        for (int attempt = 0; ; attempt++) {
            try {
                for (MessageQueue q : p.fetchPublishMessageQueues(topic)) {
                    if (q.getQueueId() == id) {
                        return q;
                    }
                }
                throw new IllegalStateException(topic + " has no queue " + id);
            } catch (MQClientException e) {
                if (attempt > 80) {
                    throw e;
                }
                if (!created) {
                    try {
                        p.createTopic(TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC, topic, 4, null);
                        created = true;
                    } catch (MQClientException notYet) {
                        System.err.println("create " + topic + " (attempt " + attempt + "): " + notYet.getMessage().lines().findFirst().orElse(""));
                    }
                }
                Thread.sleep(500);
            }
        }
    }

    static byte[] big(int seed) {
        byte[] b = new byte[100 * 1024];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) ('a' + (i * 7 + seed + i / 13) % 26);
        }
        return b;
    }

    static DefaultMQProducer producer(String ns, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        p.start();
        return p;
    }

    static Message msg(String topic, String tag, String key, String body) {
        Message m = new Message(topic, tag, P + key, body.getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("scenario", "import");
        return m;
    }

    static void produce(String ns) throws Exception {
        DefaultMQProducer p = producer(ns, "ImpProducer");
        for (int i = 0; i < 40; i++) {
            Message m = msg(NORMAL, i % 2 == 0 ? "TagA" : "TagB", "normal-" + i, "normal-" + i);
            m.putUserProperty("seq", String.valueOf(i));
            m.setFlag(i);
            ok(p.send(m, queue(p, NORMAL, i % 4)), "normal " + i);
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            batch.add(msg(NORMAL, "TagBatch", "batch-" + i, "batch-" + i));
        }
        ok(p.send(batch, queue(p, NORMAL, 1)), "batch");
        Message z = new Message(NORMAL, "TagBig", P + "big-1", big(1));
        ok(p.send(z, queue(p, NORMAL, 2)), "compressed");
        long now = System.currentTimeMillis();
        Message d1 = msg(DELAY, "TagD", "delay-level-1", "delay-level-1");
        d1.setDelayTimeLevel(1);
        ok(p.send(d1, queue(p, DELAY, 0)), "delay 1");
        Message d4 = msg(DELAY, "TagD", "delay-level-4", "delay-level-4");
        d4.setDelayTimeLevel(4);
        ok(p.send(d4, queue(p, DELAY, 1)), "delay 4");
        Message t2 = msg(DELAY, "TagT", "timer-2s", "timer-2s");
        t2.setDeliverTimeMs(now + 2000);
        ok(p.send(t2, queue(p, DELAY, 2)), "timer 2s");
        Message t40 = msg(DELAY, "TagT", "timer-40s", "timer-40s");
        t40.setDeliverTimeMs(now + 40000);
        ok(p.send(t40, queue(p, DELAY, 3)), "timer 40s");
        for (int q = 0; q < 4; q++) {
            ok(p.send(msg(DELAY, "TagN", "delay-normal-" + q, "delay-normal-" + q), queue(p, DELAY, q)), "delay normal");
        }

        TransactionMQProducer tp = new TransactionMQProducer(TXN_GROUP);
        tp.setNamesrvAddr(ns);
        tp.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                String k = m.getKeys().substring(P.length());
                return k.startsWith("commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : k.startsWith("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                System.out.println("produce: check of " + m.getKeys() + ", TRANSACTION_CHECK_TIMES=" + m.getProperty("TRANSACTION_CHECK_TIMES") + ": unknown");
                return LocalTransactionState.UNKNOW;
            }
        });
        tp.start();
        for (String k : new String[] {"commit-1", "rollback-1", "pending-1", "commit-2"}) {
            ok(tp.sendMessageInTransaction(msg(TXN, "TagX", k, k), null), k);
        }

        DefaultMQPullConsumer c = new DefaultMQPullConsumer(GROUP);
        c.setNamesrvAddr(ns);
        c.start();
        Set<MessageQueue> mqs = c.fetchSubscribeMessageQueues(NORMAL);
        for (MessageQueue mq : mqs) {
            // Without a prefix the queues were empty before; with one (the export round trip)
            // the group consumed part of what this run added: all but its last 5 messages.
            long at = P.isEmpty() ? 3 : c.maxOffset(mq) - 5;
            c.pull(mq, "*", 0, 3);
            c.updateConsumeOffset(mq, at);
            // Committed by hand and synchronously: a pull consumer persists only the queues it
            // was assigned, and persistAll's commits are oneway (one was lost now and then, and
            // the store then held 3 consumer offsets instead of 4).
            c.getOffsetStore().updateConsumeOffsetToBroker(mq, at, false);
        }
        // Let level 1 and the 2 s timer be delivered, the pending transaction be checked and
        // the op records (batched every 3 s) be written.
        Thread.sleep(8000);
        c.shutdown();
        tp.shutdown();
        p.shutdown();
        System.out.println("produce: done");
    }

    static String host(java.net.SocketAddress a) {
        InetSocketAddress s = (InetSocketAddress) a;
        return s.getAddress().getHostAddress() + ":" + s.getPort();
    }

    static String line(MessageExt m, boolean withStoreTime) throws Exception {
        StringBuilder p = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(m.getProperties()).entrySet()) {
            if (EXCLUDED.contains(e.getKey())) {
                continue;
            }
            if (p.length() > 1) {
                p.append(',');
            }
            p.append(Json.str(e.getKey())).append(':').append(Json.str(e.getValue()));
        }
        p.append('}');
        byte[] sha = MessageDigest.getInstance("SHA-256").digest(m.getBody());
        StringBuilder hex = new StringBuilder();
        for (byte b : sha) {
            hex.append(String.format("%02x", b & 0xff));
        }
        return "{\"topic\":" + Json.str(m.getTopic())
            + ",\"queueId\":" + m.getQueueId()
            + ",\"queueOffset\":" + String.format("%06d", m.getQueueOffset())
            + ",\"msgId\":" + Json.str(m.getMsgId())
            + ",\"tags\":" + Json.str(m.getTags())
            + ",\"keys\":" + Json.str(m.getKeys())
            + ",\"flag\":" + m.getFlag()
            + ",\"reconsumeTimes\":" + m.getReconsumeTimes()
            + ",\"bornTimestamp\":" + m.getBornTimestamp()
            + ",\"bornHost\":" + Json.str(host(m.getBornHost()))
            + ",\"storeTimestamp\":" + (withStoreTime ? String.valueOf(m.getStoreTimestamp()) : "null")
            + ",\"bodyLen\":" + m.getBody().length
            + ",\"bodySha256\":\"" + hex + "\""
            + ",\"props\":" + p + "}";
    }

    /** Pulls every queue of `topics` from `from` (or the group's committed offset) to its end. */
    static class Reader {
        final DefaultMQPullConsumer c;
        final Map<MessageQueue, Long> next = new HashMap<>();
        final TreeSet<String> lines = new TreeSet<>();
        final Set<String> keys = new HashSet<>();

        Reader(String ns, String group) throws Exception {
            c = new DefaultMQPullConsumer(group);
            c.setNamesrvAddr(ns);
            c.start();
        }

        void round(String[] topics, boolean committed) throws Exception {
            for (String t : topics) {
                for (MessageQueue mq : queues(t)) {
                    long off = next.computeIfAbsent(mq, q -> {
                        try {
                            return committed ? Math.max(0, c.fetchConsumeOffset(q, true)) : 0;
                        } catch (Exception e) {
                            throw new IllegalStateException(e);
                        }
                    });
                    while (true) {
                        PullResult r = c.pull(mq, "*", off, 32);
                        if (r.getPullStatus() != PullStatus.FOUND) {
                            break;
                        }
                        for (MessageExt m : r.getMsgFoundList()) {
                            lines.add(line(m, !LATER.contains(m.getKeys())));
                            keys.add(m.getKeys());
                        }
                        off = r.getNextBeginOffset();
                    }
                    next.put(mq, off);
                }
            }
        }

        /**
         * The queues of `t`. A broker that just (re)started may not be registered with the
         * name server yet (under load its first registration can miss, and the next comes
         * 30 s later), so a missing route is retried for up to 45 s.
         */
        Set<MessageQueue> queues(String t) throws Exception {
            for (int attempt = 0; ; attempt++) {
                try {
                    return c.fetchSubscribeMessageQueues(t);
                } catch (MQClientException e) {
                    if (attempt >= 90) {
                        throw e;
                    }
                    if (attempt % 10 == 0) {
                        System.err.println("route of " + t + " (attempt " + attempt + "): "
                            + e.getMessage().lines().findFirst().orElse(""));
                    }
                    Thread.sleep(500);
                }
            }
        }

        void write(String out) throws Exception {
            Files.write(Paths.get(out), new ArrayList<>(lines), StandardCharsets.UTF_8);
            c.shutdown();
        }
    }

    static void consume(String ns, String out) throws Exception {
        TransactionMQProducer tp = new TransactionMQProducer(TXN_GROUP);
        tp.setNamesrvAddr(ns);
        tp.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                boolean commit = m.getKeys().startsWith(P + "pending");
                System.out.println("consume: check of " + m.getKeys() + ", TRANSACTION_CHECK_TIMES="
                    + m.getProperty("TRANSACTION_CHECK_TIMES") + ": " + (commit ? "commit" : "rollback"));
                return commit ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        tp.start();
        Reader r = new Reader(ns, GROUP);
        // The broker must be registered before the producer can learn its route (queues
        // waits for that).
        r.queues(TXN);
        // A producer that has sent nothing knows no broker and heartbeats to none, so no
        // check could reach it: learn the route and heartbeat now.
        tp.getDefaultMQProducerImpl().getMqClientFactory().updateTopicRouteInfoFromNameServer(TXN);
        tp.getDefaultMQProducerImpl().getMqClientFactory().sendHeartbeatToAllBrokerWithLock();
        String[] topics = {NORMAL, DELAY, TXN};
        long deadline = System.currentTimeMillis() + 120_000;
        while (true) {
            r.round(topics, true);
            if (r.keys.containsAll(LATER)) {
                break;
            }
            if (System.currentTimeMillis() > deadline) {
                Set<String> missing = new TreeSet<>(LATER);
                missing.removeAll(r.keys);
                System.out.println("consume: gave up waiting for " + missing);
                break;
            }
            Thread.sleep(500);
        }
        // Anything a late check or delivery added meanwhile.
        Thread.sleep(1000);
        r.round(topics, true);
        r.write(out);
        tp.shutdown();
        System.out.println("consume: " + r.lines.size() + " messages -> " + out);
    }

    static void goldenProduce(String ns, String topic) throws Exception {
        DefaultMQProducer p = producer(ns, "GoldenProducer");
        for (int i = 0; i < 30; i++) {
            Message m = msg(topic, "TagG" + (i % 3), "golden-" + i, "golden-" + i);
            m.setFlag(i);
            ok(p.send(m, queue(p, topic, i % 4)), "golden " + i);
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            batch.add(msg(topic, "TagBatch", "golden-batch-" + i, "golden-batch-" + i));
        }
        ok(p.send(batch, queue(p, topic, 1)), "batch");
        for (int i = 0; i < 12; i++) {
            ok(p.send(new Message(topic, "TagBig", "golden-big-" + i, big(i)), queue(p, topic, i % 4)), "big " + i);
        }
        p.shutdown();
        System.out.println("golden-produce: 52 messages to " + topic);
    }

    static void dump(String ns, String group, String out, String[] topics) throws Exception {
        Reader r = new Reader(ns, group);
        r.round(topics, false);
        r.write(out);
        System.out.println("dump: " + r.lines.size() + " messages of " + Arrays.toString(topics) + " -> " + out);
    }
}
