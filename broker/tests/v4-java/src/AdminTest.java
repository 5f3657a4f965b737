// mqadmin (org.apache.rocketmq:rocketmq-tools 5.5.0, MQAdminStartup) side by side: every
// command is run as `mqadmin <command> … -n <namesrv>` would run it (in one JVM, which saves
// a JVM start per command), and its output is checked. tests/ci/fidelity.sh runs it twice:
// against rocklet, and against Apache RocketMQ 5.5.0 (name server and broker, cluster and
// broker both named `rocklet`), with the same checks; the few that differ by design are
// marked `rocklet only` (Apache's behaviour named beside them).
//
//   java -cp <jars>:<classes> AdminTest <namesrv> rocklet|apache
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class AdminTest {
    static String ns;
    static boolean rocklet;
    static int passed = 0;
    static List<String> failures = new ArrayList<>();

    /** Runs one mqadmin command; returns what it printed (stdout and stderr). */
    static String mqadmin(String... args) {
        String[] all = new String[args.length + 2];
        System.arraycopy(args, 0, all, 0, args.length);
        all[args.length] = "-n";
        all[args.length + 1] = ns;
        PrintStream out = System.out;
        PrintStream err = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        PrintStream cap = new PrintStream(buf, true);
        System.setOut(cap);
        System.setErr(cap);
        try {
            MQAdminStartup.main0(all, null);
        } finally {
            System.setOut(out);
            System.setErr(err);
        }
        return buf.toString();
    }

    /** Runs a command and checks that its output holds every `want` and no `unwanted`. */
    static String expect(String[] cmd, String[] want, String... unwanted) {
        return expectWithin(0, cmd, want, unwanted);
    }

    /** The same, running the command again until it passes or `seconds` are over. */
    static String expectWithin(int seconds, String[] cmd, String[] want, String... unwanted) {
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        String got;
        List<String> missing;
        do {
            got = mqadmin(cmd);
            missing = problems(got, want, unwanted);
        } while (!missing.isEmpty() && System.currentTimeMillis() < deadline);
        String name = "mqadmin " + String.join(" ", cmd);
        if (missing.isEmpty()) {
            passed++;
            System.out.println("ok: " + name);
        } else {
            failures.add(name);
            System.out.println("FAIL: " + name + ": " + missing + "\n---- output\n" + got + "----");
        }
        return got;
    }

    static List<String> problems(String got, String[] want, String[] unwanted) {
        List<String> missing = new ArrayList<>();
        for (String w : want) {
            if (!got.contains(w)) {
                missing.add("lacks `" + w + "`");
            }
        }
        for (String u : unwanted) {
            if (got.contains(u)) {
                missing.add("holds `" + u + "`");
            }
        }
        return missing;
    }

    static String[] a(String... s) {
        return s;
    }

    static void check(boolean ok, String what) {
        if (ok) {
            passed++;
            System.out.println("ok: " + what);
        } else {
            failures.add(what);
            System.out.println("FAIL: " + what);
        }
    }

    /** freshSend until it fails (a broker re-registers its permission in its own time), for 20 s. */
    static String expectSendFails(String group, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + 20_000;
        String err;
        do {
            err = freshSend(group, topic);
            if (err == null) {
                // Sent: one more message for the group to consume.
                sentWhileDraining++;
                Thread.sleep(500);
            }
        } while (err == null && System.currentTimeMillis() < deadline);
        return err;
    }

    /** freshSend until it succeeds, for `seconds`. */
    static String freshSendWithin(int seconds, String group, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        String err;
        do {
            err = freshSend(group, topic);
            if (err != null) {
                Thread.sleep(500);
            }
        } while (err != null && System.currentTimeMillis() < deadline);
        return err;
    }

    static int sentWhileDraining = 0;

    /** A send by a producer started now (so with a fresh route): its error, null when sent. */
    static String freshSend(String group, String topic) throws Exception {
        DefaultMQProducer f = new DefaultMQProducer(group);
        f.setNamesrvAddr(ns);
        f.setRetryTimesWhenSendFailed(0);
        f.start();
        try {
            f.send(new Message(topic, "TagA", ("fresh").getBytes()));
            return null;
        } catch (Exception e) {
            return e.toString();
        } finally {
            f.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        ns = args[0];
        rocklet = !(args.length > 1 && args[1].equals("apache"));
        System.out.println("== mqadmin 5.5.0 against " + (rocklet ? "rocklet" : "Apache RocketMQ 5.5.0") + " at " + ns);
        String stamp = Long.toString(System.currentTimeMillis(), 36);
        String topic = "AdmTopic" + stamp;
        String group = "AdmGroup" + stamp;
        String pgroup = "AdmProducer" + stamp;
        String fifo = "AdmFifo" + stamp;
        String[] errors = {"Exception", "command failed"};

        String route = expect(a("clusterList"), a("rocklet", "#Cluster Name"), errors);
        String addr = route.replaceAll("(?s).*?(127\\.0\\.0\\.1:\\d+).*", "$1");
        expect(a("brokerStatus", "-b", addr), a("brokerVersionDesc", "msgPutTotalTodayNow", "brokerActive"), errors);
        expect(a("updateTopic", "-c", "rocklet", "-t", topic, "-r", "8", "-w", "8"),
            a("create topic to " + addr + " success"), errors);
        expect(a("topicList"), a(topic), errors);
        expect(a("topicRoute", "-t", topic), a("\"brokerName\":\"rocklet\"", "\"readQueueNums\":8"), errors);
        // rocklet only: shrinking is refused by name (Apache shrinks, its queues' messages
        // left unread).
        if (rocklet) {
            expect(a("updateTopic", "-b", addr, "-t", topic, "-r", "1", "-w", "1"), a("cannot remove queues"));
        }
        // An order topic: the flag on the topic, its conf (brokerName:queues) in the name
        // server's KV config, carried by the route (both name servers run with
        // orderMessageEnable on, fidelity.sh); a v4 producer sends only to the queues the
        // conf names.
        String ordered = "AdmOrdered" + stamp;
        expect(a("updateTopic", "-c", "rocklet", "-t", ordered, "-o", "true"),
            a("create topic to " + addr + " success", "set cluster orderConf. isOrder=true, orderConf=[rocklet:8]"), errors);
        expect(a("topicRoute", "-t", ordered), a("\"orderTopicConf\":\"rocklet:8\"", "\"readQueueNums\":8"), errors);
        expect(a("updateOrderConf", "-t", ordered, "-m", "get"),
            a("get orderConf success. topic=[" + ordered + "], orderConf=[rocklet:8]"), errors);
        expect(a("updateOrderConf", "-t", ordered, "-m", "put", "-v", "rocklet:2"),
            a("update orderConf success. topic=[" + ordered + "], orderConf=[rocklet:2]"), errors);
        expect(a("topicRoute", "-t", ordered), a("\"orderTopicConf\":\"rocklet:2\""), errors);
        DefaultMQProducer op = new DefaultMQProducer(pgroup + "O");
        op.setNamesrvAddr(ns);
        op.start();
        java.util.Set<Integer> orderedQueues = new java.util.TreeSet<>();
        try {
            for (int i = 0; i < 6; i++) {
                orderedQueues.add(op.send(new Message(ordered, "TagA", ("o" + i).getBytes())).getMessageQueue().getQueueId());
            }
        } finally {
            op.shutdown();
        }
        check(orderedQueues.equals(new java.util.TreeSet<>(java.util.Arrays.asList(0, 1))),
            "a v4 producer sends to the order topic's queues the conf names (0 and 1): " + orderedQueues);
        expect(a("updateOrderConf", "-t", ordered, "-m", "delete"), a("delete orderConf success"), errors);
        expect(a("updateOrderConf", "-t", ordered, "-m", "get"),
            a("No config item, Namespace: ORDER_TOPIC_CONFIG Key: " + ordered));
        expect(a("updateOrderConf", "-t", ordered, "-m", "put", "-v", "rocklet:2"),
            a("update orderConf success"), errors);
        expect(a("deleteTopic", "-c", "rocklet", "-t", ordered),
            a("delete topic [" + ordered + "] from cluster [rocklet] success"), errors);
        if (rocklet) {
            // rocklet only: the conf is kept on the topic and goes with it (Apache 5.5's
            // deleteTopic leaves the name server's KV entry, which a topic made again under
            // the name then finds).
            expect(a("updateOrderConf", "-t", ordered, "-m", "get"),
                a("No config item, Namespace: ORDER_TOPIC_CONFIG Key: " + ordered));
        } else {
            expect(a("updateOrderConf", "-t", ordered, "-m", "get"), a("orderConf=[rocklet:2]"), errors);
        }
        expect(a("updateSubGroup", "-c", "rocklet", "-g", fifo, "-o", "true"),
            a("create subscription group to " + addr + " success"), errors);

        DefaultMQProducer p = new DefaultMQProducer(pgroup);
        p.setNamesrvAddr(ns);
        p.start();
        String offsetId = null;
        // The producer starts at a random queue of the 8: look up the first message where it went.
        int firstQueue = -1;
        long firstOffset = -1;
        String[] msgIds = new String[4];
        long before = System.currentTimeMillis();
        for (int i = 0; i < 4; i++) {
            Message m = new Message(topic, "TagA", "key-" + i, ("admin-" + i).getBytes());
            SendResult r = p.send(m);
            msgIds[i] = r.getMsgId();
            if (i == 0) {
                offsetId = r.getOffsetMsgId();
                firstQueue = r.getMessageQueue().getQueueId();
                firstOffset = r.getQueueOffset();
            }
        }
        expect(a("topicStatus", "-t", topic), a("#Broker Name", "rocklet"), errors);
        expect(a("producerConnection", "-g", pgroup, "-t", topic), a("JAVA"), errors);
        expect(a("queryMsgById", "-t", topic, "-i", offsetId), a("Topic:", topic, "[key-0]", "[TagA]"), errors);
        expect(a("queryMsgByOffset", "-t", topic, "-b", "rocklet", "-i", String.valueOf(firstQueue), "-o",
            String.valueOf(firstOffset)), a("OffsetID:", topic, "[key-0]"), errors);
        // The consume-queue entry of the first message: its log offset, record size and tag
        // code (Java's "TagA".hashCode()).
        expect(a("queryCq", "-t", topic, "-q", String.valueOf(firstQueue), "-i", String.valueOf(firstOffset), "-c", "1"),
            a("Queue data:", "idx: " + firstOffset, "tagsCode=2598919", "physicSize="), "physicSize=0,", "Exception", "command failed");
        // QUERY_MESSAGE from the broker's key index: by key, and by message id (the client's
        // unique key).
        expect(a("queryMsgByKey", "-t", topic, "-k", "key-1"), a("#Message ID", msgIds[1]), errors);
        expect(a("queryMsgByKey", "-t", topic, "-k", "no-such-key"), a("query message by key finished, but no message"));
        expect(a("queryMsgByUniqueKey", "-t", topic, "-i", msgIds[2]), a("Topic:", topic, "[key-2]", "[TagA]"), errors);

        // wipeWritePerm drains the broker before maintenance: routes show its queues read-only
        // (perm 4), so a producer with a fresh route finds no queue to send to; addWritePerm
        // restores both.
        expect(a("wipeWritePerm", "-b", "rocklet"), a("wipe write perm of broker[rocklet] in name server[" + ns + "] OK"), errors);
        expect(a("topicRoute", "-t", topic), a("\"perm\":4"), errors);
        String refused = freshSend(pgroup + "W", topic);
        check(refused != null, "a fresh producer cannot send while the write permission is wiped (" + refused + ")");
        if (rocklet) {
            // rocklet only: the broker itself refuses sends (NO_PERMISSION, which producers
            // retry on another broker), a producer's old route or not. Apache's name server
            // alone holds the wiped permission: its broker takes sends until the producer's
            // route is refreshed (every 30 s).
            int code = 0;
            try {
                p.send(new Message(topic, "TagA", "wiped".getBytes()));
            } catch (Exception e) {
                for (Throwable t = e; t != null; t = t.getCause()) {
                    if (t instanceof MQBrokerException) {
                        code = ((MQBrokerException) t).getResponseCode();
                    }
                }
            }
            check(code == 16, "the broker refuses a send on an old route while wiped with NO_PERMISSION (code " + code + ")");
        }
        expect(a("addWritePerm", "-b", "rocklet"), a("add write perm of broker[rocklet] in name server[" + ns + "] OK"), errors);
        expect(a("topicRoute", "-t", topic), a("\"perm\":6"), errors);
        String sent = freshSend(pgroup + "A", topic);
        check(sent == null, "a fresh producer sends again after addWritePerm (" + sent + ")");
        p.send(new Message(topic, "TagA", "after".getBytes()));

        AtomicInteger consumed = new AtomicInteger();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(500);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            consumed.addAndGet(msgs.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long deadline = System.currentTimeMillis() + 30_000;
        // The 4 sent first, the one sent after addWritePerm and the fresh producer's.
        int total = 6;
        while (consumed.get() < total && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        expect(a("consumerConnection", "-g", group), a(c.buildMQClientId(), topic, "CONSUME_PASSIVELY", "CLUSTERING"), errors);
        // consumerStatus: the broker asks the client itself for its running info
        // (GET_CONSUMER_RUNNING_INFO on the client's connection) and relays the answer.
        // (Only with -i: without it mqadmin writes each client's into ./<now>/<clientId>.)
        // (A property of the client is named pullTimeDelayMillsWhenException.)
        expect(a("consumerStatus", "-g", group, "-i", c.buildMQClientId()),
            a("#Consumer Properties#", "#Consumer Subscription#", "Topic: " + topic, "#Consumer Offset#"),
            "MQBrokerException", "command failed");
        expect(a("consumerStatus", "-g", group, "-i", "127.0.0.9@nobody"), a("<" + group + "> <127.0.0.9@nobody> not online"));
        // The consumer persists its offsets 10 s after it starts, then every 500 ms.
        expectWithin(20, a("consumerProgress", "-g", group), a(topic, "Consume Diff Total: 0"), errors);
        // The group's config and every group's progress on the broker.
        expect(a("getConsumerConfig", "-g", group), a("groupName", group, "consumeMessageOrderly", "retryMaxTimes"), errors);
        expect(a("brokerConsumeStats", "-b", addr), a("#Topic", "#Group", topic, group), errors);
        // The broker's and the name server's config, in Apache's names.
        String conf = expect(a("getBrokerConfig", "-b", addr),
            a("brokerClusterName", "brokerName", "flushDiskType", "brokerPermission", "autoCreateTopicEnable"), errors);
        check(Pattern.compile("brokerPermission\\s+=\\s+6").matcher(conf).find(), "getBrokerConfig shows brokerPermission 6");
        String nsConfig = expect(a("getNamesrvConfig"), a("listenPort"), errors);
        check(Pattern.compile("orderMessageEnable\\s+=\\s+true").matcher(nsConfig).find(),
            "getNamesrvConfig shows orderMessageEnable on, as the name server runs");
        // updateBrokerConfig brokerPermission 4 is a drain too: a fresh producer finds no queue
        // to send to; 6 restores it.
        expect(a("updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "4"),
            a("update broker config success, " + addr), errors);
        conf = expect(a("getBrokerConfig", "-b", addr), a("brokerPermission"), errors);
        check(Pattern.compile("brokerPermission\\s+=\\s+4").matcher(conf).find(), "getBrokerConfig shows brokerPermission 4");
        String drained = expectSendFails(pgroup + "D", topic);
        check(drained != null, "a fresh producer cannot send after updateBrokerConfig brokerPermission 4 (" + drained + ")");
        expect(a("updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "6"),
            a("update broker config success, " + addr), errors);
        String back = freshSendWithin(20, pgroup + "E", topic);
        check(back == null, "a fresh producer sends again after brokerPermission 6 (" + back + ")");
        total += 1 + sentWhileDraining;
        if (rocklet) {
            // rocklet only: a key it cannot change while running is refused by name (Apache
            // takes most keys live).
            expect(a("updateBrokerConfig", "-b", addr, "-k", "flushDiskType", "-v", "SYNC_FLUSH"),
                a("flushDiskType", "cannot be changed while rocklet runs"));
        }
        deadline = System.currentTimeMillis() + 30_000;
        while (consumed.get() < total && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        expectWithin(20, a("consumerProgress", "-g", group), a(topic, "Consume Diff Total: 0"), errors);

        // Online: the broker resets the group's offsets at once (Apache 5.5 resets on the
        // broker), so consumerProgress shows every message to consume again right after, while
        // the (suspended) consumer still holds its old offsets; once it goes on, it consumes
        // them again.
        int seen = consumed.get();
        c.suspend();
        expect(a("resetOffsetByTime", "-g", group, "-t", topic, "-s", Long.toString(before - 1000)),
            a("rocklet"), errors);
        expect(a("consumerProgress", "-g", group, "-t", topic), a(topic, "Consume Diff Total: " + total), errors);
        c.resume();
        deadline = System.currentTimeMillis() + 40_000;
        while (consumed.get() < seen + total && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        check(consumed.get() >= seen + total, "the online group consumed the " + total + " messages again after resetOffsetByTime ("
            + (consumed.get() - seen) + ")");
        c.shutdown();
        // Offline: reset on the broker all the same (Apache 5.5's server-side reset), to the
        // queues' ends: nothing left to consume.
        Thread.sleep(500);
        expect(a("resetOffsetByTime", "-g", group, "-t", topic, "-s", "now"), a("#brokerName", "rocklet"), errors);
        expect(a("consumerProgress", "-g", group, "-t", topic), a(topic, "Consume Diff Total: 0"), errors);
        expect(a("deleteTopic", "-c", "rocklet", "-t", topic),
            a("delete topic [" + topic + "] from cluster [rocklet] success", "delete topic [" + topic + "] from NameServer success"), errors);
        // Gone from the topic list (the group's retry topic stays).
        expect(a("topicList"), a("%RETRY%" + group), topic, "Exception", "command failed");
        // deleteSubGroup of the FIFO group declared above: its declaration goes. (Apache's
        // getConsumerConfig then shows it again with the defaults, not orderly: its broker
        // re-creates a group it is asked about, autoCreateSubscriptionGroup.)
        Pattern orderly = Pattern.compile("consumeMessageOrderly\\s+=\\s+true");
        String cfgBefore = expect(a("getConsumerConfig", "-g", fifo), a("groupName", fifo), errors);
        check(orderly.matcher(cfgBefore).find(), "getConsumerConfig shows the FIFO group orderly");
        String deleted = "delete subscription group [" + fifo + "] from broker [" + addr + "] in cluster [rocklet] success";
        if (rocklet) {
            // rocklet only: the group's retry and dead-letter topics, which mqadmin asks to
            // delete next, are kept, saying so (their messages stay readable).
            expect(a("deleteSubGroup", "-c", "rocklet", "-g", fifo),
                a(deleted, "keeps a group's retry and dead-letter topics"));
        } else {
            expect(a("deleteSubGroup", "-c", "rocklet", "-g", fifo), a(deleted), errors);
        }
        String cfgAfter = mqadmin("getConsumerConfig", "-g", fifo);
        check(!orderly.matcher(cfgAfter).find(), "after deleteSubGroup the group is not orderly any more");
        if (rocklet) {
            // rocklet only: no such group any more (Apache re-creates it when asked).
            expect(a("getConsumerConfig", "-g", fifo), a(), "groupName");
        }
        p.shutdown();

        System.out.println();
        if (!failures.isEmpty()) {
            System.out.println("failed: " + failures);
        }
        System.out.println(passed + " passed, " + failures.size() + " failed");
        System.exit(failures.isEmpty() ? 0 : 1);
    }
}
