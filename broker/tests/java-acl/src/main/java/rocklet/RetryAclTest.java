package rocklet;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The official RocketMQ 4 Java push consumer's retry cycle as a normal user (not a super
 * user) with authentication on (issue #29, items 1 and 2): the first delivery fails
 * (RECONSUME_LATER), the client sends the message back (CONSUMER_SEND_MSG_BACK), pulls it
 * from {@code %RETRY%<group>} and succeeds. The redelivery must come from the broker's retry
 * topic (it carries RETRY_TOPIC), not from the client's local fallback, which is what a
 * refused send-back would leave.
 *
 * <p>The user needs Pub and Sub on {@code Topic:AclRetry*} and Sub on
 * {@code Group:AclRetry*}, nothing else.
 *
 * <p>Usage: RetryAclTest NAMESRV_ADDR ACCESS_KEY SECRET_KEY. Exits 1 on the first failed check.
 */
public final class RetryAclTest {
    private static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            System.exit(1);
        }
        System.out.println("ok: " + what);
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0];
        AclClientRPCHook hook = new AclClientRPCHook(new SessionCredentials(args[1], args[2]));
        String run = UUID.randomUUID().toString().substring(0, 8);
        String topic = "AclRetry_" + run;
        String group = "AclRetryG_" + run;

        DefaultMQProducer producer = new DefaultMQProducer("AclRetryPG_" + run, hook);
        producer.setNamesrvAddr(ns);
        producer.setSendMsgTimeout(10000);
        producer.start();
        SendResult r = producer.send(
            new Message(topic, "TagA", "retry-me".getBytes(StandardCharsets.UTF_8)));
        check(r.getSendStatus() == SendStatus.SEND_OK, "normal user's send: " + r.getSendStatus());
        producer.shutdown();

        List<MessageExt> deliveries = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(
            group, new AclClientRPCHook(new SessionCredentials(args[1], args[2])),
            new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            deliveries.addAll(msgs);
            if (msgs.get(0).getReconsumeTimes() == 0) {
                // Level 1 (1 s) instead of the default 3 + reconsume times (10 s).
                context.setDelayLevelWhenNextConsume(1);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.currentTimeMillis() + 60_000;
        while (deliveries.size() < 2 && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        consumer.shutdown();
        check(deliveries.size() >= 2, "the failed message was delivered again: " + deliveries.size());
        MessageExt again = deliveries.get(1);
        check("retry-me".equals(new String(again.getBody(), StandardCharsets.UTF_8)),
            "the same body again");
        check(topic.equals(again.getTopic()), "as a message of its topic: " + again.getTopic());
        check(again.getReconsumeTimes() == 1, "reconsume times 1: " + again.getReconsumeTimes());
        check(topic.equals(again.getProperty("RETRY_TOPIC")),
            "redelivered by the broker from %RETRY%" + group + " (RETRY_TOPIC "
                + again.getProperty("RETRY_TOPIC") + "), not by the client's local fallback");
        System.out.println("java v4 retry cycle as a normal user: all checks passed");
        System.exit(0);
    }
}
