// The RocketMQ 4 Java client (org.apache.rocketmq:rocketmq-client 5.5.0) against rocklet.
//
//   java -cp <jars>:<classes> V4JavaTest <namesrv> litepull|txn|rebalance|reply
//
// litepull   DefaultLitePullConsumer (it pulls with LITE_PULL_MESSAGE, 361) receives what was sent
// txn        TransactionMQProducer: the send result's transaction id is the one
//            executeLocalTransaction and checkLocalTransaction are given
// rebalance  a push consumer group of 2: the first member gives up half its queues within 2 s
//            of the second joining (NOTIFY_CONSUMER_IDS_CHANGED; the clients' own timer is 20 s)
// reply      request/reply: DefaultMQProducer.request() gets the reply a push consumer made with
//            MessageUtil.createReplyMessage and sent (SEND_REPLY_MESSAGE_V2, pushed back to the
//            requester as PUSH_REPLY_MESSAGE_TO_CLIENT), for each of 5 requests, and a reply
//            to a client that is not connected is refused
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.MessageQueue;

public class V4JavaTest {
    static String ns;
    static final String STAMP = Long.toString(System.currentTimeMillis(), 36);

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            System.exit(1);
        }
    }

    static DefaultMQProducer producer() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("JavaProducer" + STAMP);
        p.setNamesrvAddr(ns);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        return p;
    }

    public static void main(String[] args) throws Exception {
        ns = args[0];
        switch (args[1]) {
            case "litepull": litePull(); break;
            case "txn": transaction(); break;
            case "rebalance": rebalance(); break;
            case "reply": requestReply(); break;
            default: check(false, "unknown test " + args[1]);
        }
        System.out.println("ok: " + args[1]);
        System.exit(0);
    }

    static void litePull() throws Exception {
        String topic = "JavaLitePull" + STAMP;
        DefaultMQProducer p = producer();
        Set<String> sent = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < 8; i++) {
            SendResult r = p.send(new Message(topic, ("lite-" + i).getBytes()));
            check(r.getSendStatus() == SendStatus.SEND_OK, "send " + r);
            sent.add(r.getMsgId());
        }
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("JavaLitePullGroup" + STAMP);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        long deadline = System.currentTimeMillis() + 60_000;
        while (!sent.isEmpty() && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(1000)) {
                sent.remove(m.getMsgId());
            }
        }
        check(sent.isEmpty(), sent.size() + " of 8 messages not received by the lite pull consumer");
        c.shutdown();
        p.shutdown();
    }

    static void transaction() throws Exception {
        String topic = "JavaTxnIds" + STAMP;
        Map<String, String> executed = new ConcurrentHashMap<>();
        Map<String, String> checked = new ConcurrentHashMap<>();
        CountDownLatch checks = new CountDownLatch(1);
        TransactionMQProducer p = new TransactionMQProducer("JavaTxnGroup" + STAMP);
        p.setNamesrvAddr(ns);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                executed.put(new String(msg.getBody()), msg.getTransactionId());
                return LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checked.put(new String(msg.getBody()), msg.getTransactionId());
                checks.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        TransactionSendResult r = p.sendMessageInTransaction(new Message(topic, "txn-1".getBytes()), null);
        check(r.getSendStatus() == SendStatus.SEND_OK, "send " + r);
        String id = r.getTransactionId();
        check(id != null && !id.isEmpty(), "the send result has no transaction id");
        check(id.equals(executed.get("txn-1")),
            "send result's transaction id " + id + " != executeLocalTransaction's " + executed.get("txn-1"));
        check(checks.await(60, TimeUnit.SECONDS), "no checkLocalTransaction in 60 s");
        check(id.equals(checked.get("txn-1")),
            "send result's transaction id " + id + " != checkLocalTransaction's " + checked.get("txn-1"));
        System.out.println("transaction id " + id + " (msgId " + r.getMsgId() + ")");
        p.shutdown();
    }

    /** Records the queues the last rebalance gave this consumer. */
    static class Recording implements AllocateMessageQueueStrategy {
        final AllocateMessageQueueAveragely inner = new AllocateMessageQueueAveragely();
        volatile int topicQueues = -1;
        final String topic;

        Recording(String topic) {
            this.topic = topic;
        }

        public List<MessageQueue> allocate(String group, String cid, List<MessageQueue> all, List<String> cids) {
            List<MessageQueue> mine = inner.allocate(group, cid, all, cids);
            if (!all.isEmpty() && all.get(0).getTopic().equals(topic)) {
                topicQueues = mine.size();
            }
            return mine;
        }

        public String getName() {
            return "RECORDING";
        }
    }

    static DefaultMQPushConsumer member(String group, String topic, String instance, Recording r) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance);
        c.setAllocateMessageQueueStrategy(r);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        c.start();
        return c;
    }

    static boolean waitFor(Recording r, int queues, long ms) throws InterruptedException {
        long deadline = System.currentTimeMillis() + ms;
        while (r.topicQueues != queues && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
        return r.topicQueues == queues;
    }

    static void rebalance() throws Exception {
        String topic = "JavaRebalance" + STAMP;
        String group = "JavaRebalanceGroup" + STAMP;
        DefaultMQProducer p = producer();
        p.send(new Message(topic, "make-the-topic".getBytes()));
        Recording a = new Recording(topic);
        Recording b = new Recording(topic);
        DefaultMQPushConsumer ca = member(group, topic, "memberA" + STAMP, a);
        check(waitFor(a, 4, 30_000), "the first member holds " + a.topicQueues + " queues, not all 4");
        long joined = System.currentTimeMillis();
        DefaultMQPushConsumer cb = member(group, topic, "memberB" + STAMP, b);
        boolean ok = waitFor(a, 2, 2_000);
        long took = System.currentTimeMillis() - joined;
        check(ok, "the first member still holds " + a.topicQueues + " queues 2 s after the second joined");
        check(waitFor(b, 2, 2_000), "the second member holds " + b.topicQueues + " queues");
        System.out.println("rebalanced " + took + " ms after the second member joined");
        cb.shutdown();
        ca.shutdown();
        p.shutdown();
    }

    static void requestReply() throws Exception {
        String topic = "JavaRequest" + STAMP;
        DefaultMQProducer requester = producer();
        // The topic exists before the consumer subscribes (its first send creates it).
        requester.send(new Message(topic, "make-the-topic".getBytes()));
        DefaultMQProducer replier = new DefaultMQProducer("JavaReplier" + STAMP);
        replier.setNamesrvAddr(ns);
        replier.setInstanceName("replier");
        replier.setRetryTimesWhenSendFailed(0);
        replier.start();
        List<String> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("JavaResponder" + STAMP);
        c.setNamesrvAddr(ns);
        c.setInstanceName("responder");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (m.getProperty(MessageConst.PROPERTY_CORRELATION_ID) == null) {
                    continue; // not a request
                }
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("re:" + new String(m.getBody())).getBytes());
                    SendResult r = replier.send(reply, 10_000);
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        failures.add("reply send " + r);
                    }
                } catch (Exception e) {
                    failures.add("reply to " + new String(m.getBody()) + ": " + e);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        for (int i = 0; i < 5; i++) {
            String body = "question-" + i;
            Message reply = requester.request(new Message(topic, body.getBytes()), 30_000);
            check(reply != null, "no reply to " + body + " " + failures);
            check(("re:" + body).equals(new String(reply.getBody())),
                "reply to " + body + " is " + new String(reply.getBody()));
            check(reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID) != null, "the reply has no CORRELATION_ID");
        }
        check(failures.isEmpty(), "replier failures: " + failures);
        // A reply to a requester that is not connected: refused, naming it.
        Message orphan = new Message("rocklet_REPLY_TOPIC", "nobody".getBytes());
        org.apache.rocketmq.common.message.MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_MESSAGE_TYPE, "reply");
        org.apache.rocketmq.common.message.MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT, "127.0.0.1@gone");
        org.apache.rocketmq.common.message.MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_CORRELATION_ID, "x");
        try {
            replier.send(orphan, 10_000);
            check(false, "a reply to a client that is not connected was accepted");
        } catch (org.apache.rocketmq.client.exception.MQClientException e) {
            check(String.valueOf(e.getCause()).contains("channel of <127.0.0.1@gone> not found"),
                "the refusal does not name the client: " + e + " / " + e.getCause());
        }
        System.out.println("5 replies received");
        c.shutdown();
        replier.shutdown();
        requester.shutdown();
    }
}
