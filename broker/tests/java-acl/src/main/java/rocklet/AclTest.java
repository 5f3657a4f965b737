package rocklet;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The official RocketMQ 4 Java client with {@code AclClientRPCHook}, unmodified, against a
 * rocklet broker with authentication on (users as tests/ci/security.sh configures them):
 *
 * <ol>
 *   <li>with the right credentials a producer sends, a transactional producer commits, and a
 *       pull consumer receives all of them;</li>
 *   <li>a wrong secret, an unknown access key and no credentials at all are refused, and the
 *       client reports the broker's NO_PERMISSION (16) with the reason.</li>
 * </ol>
 *
 * Usage: AclTest NAMESRV_ADDR ACCESS_KEY SECRET_KEY. Exits 1 on the first failed check.
 */
public final class AclTest {
    private static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            System.exit(1);
        }
        System.out.println("ok: " + what);
    }

    private static RPCHook hook(String ak, String sk) {
        return new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    private static Message message(String topic, String body) {
        return new Message(topic, "TagA", body.getBytes(StandardCharsets.UTF_8));
    }

    /** The broker's answer code of a failed send, or -1 (the cause chain is searched). */
    private static int brokerCode(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof MQBrokerException) {
                return ((MQBrokerException) c).getResponseCode();
            }
            if (c instanceof MQClientException && ((MQClientException) c).getResponseCode() > 0) {
                return ((MQClientException) c).getResponseCode();
            }
        }
        return -1;
    }

    private static String refusedSend(String ns, RPCHook hook, String topic) throws Exception {
        DefaultMQProducer p = hook == null
            ? new DefaultMQProducer("AclBadPG" + UUID.randomUUID().toString().substring(0, 6))
            : new DefaultMQProducer("AclBadPG" + UUID.randomUUID().toString().substring(0, 6), hook);
        p.setNamesrvAddr(ns);
        p.setRetryTimesWhenSendFailed(0);
        p.setSendMsgTimeout(5000);
        p.start();
        try {
            SendResult r = p.send(message(topic, "refused"));
            return "sent: " + r;
        } catch (Exception e) {
            StringBuilder why = new StringBuilder();
            for (Throwable c = e; c != null; c = c.getCause()) {
                why.append(" | ").append(c.getMessage());
            }
            return brokerCode(e) + why.toString();
        } finally {
            p.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String ak = args[1];
        String sk = args[2];
        String run = UUID.randomUUID().toString().substring(0, 8);
        String topic = "AclJava_" + run;

        // 1. The right credentials: send, transaction, receive.
        DefaultMQProducer producer = new DefaultMQProducer("AclPG_" + run, hook(ak, sk));
        producer.setNamesrvAddr(ns);
        producer.setSendMsgTimeout(10000);
        producer.start();
        Set<String> want = new HashSet<>();
        for (int i = 0; i < 3; i++) {
            String body = "plain-" + i;
            SendResult r = producer.send(message(topic, body));
            check(r.getSendStatus() == SendStatus.SEND_OK, "signed send " + i + ": " + r.getSendStatus());
            want.add(body);
        }
        producer.shutdown();

        TransactionMQProducer txp = new TransactionMQProducer("AclTxPG_" + run, hook(ak, sk));
        txp.setNamesrvAddr(ns);
        txp.setSendMsgTimeout(10000);
        txp.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        txp.start();
        TransactionSendResult tr = txp.sendMessageInTransaction(message(topic, "txn-0"), null);
        check(tr.getSendStatus() == SendStatus.SEND_OK
            && tr.getLocalTransactionState() == LocalTransactionState.COMMIT_MESSAGE,
            "signed transaction committed: " + tr.getSendStatus() + " " + tr.getLocalTransactionState());
        want.add("txn-0");

        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer =
            new DefaultMQPushConsumer("AclG_" + run, hook(ak, sk), new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                got.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.currentTimeMillis() + 60_000;
        while (!got.containsAll(want) && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        consumer.shutdown();
        txp.shutdown();
        check(got.containsAll(want), "signed push consumer received " + got + " of " + want);

        // 2. Wrong secret, unknown key, no credentials: refused with NO_PERMISSION and a reason.
        List<String[]> bad = new ArrayList<>();
        bad.add(new String[] {"wrong secret", ak, sk + "x", "bad signature"});
        bad.add(new String[] {"unknown access key", "nobody_" + run, "x", "unknown access key"});
        bad.add(new String[] {"no credentials", null, null, "no AccessKey"});
        for (String[] b : bad) {
            String r = refusedSend(ns, b[1] == null ? null : hook(b[1], b[2]), topic);
            check(r.startsWith("16 | ") && r.contains(b[3]), b[0] + " refused with NO_PERMISSION: " + r);
        }
        System.out.println("java v4 AclClientRPCHook: all checks passed");
        System.exit(0);
    }
}
