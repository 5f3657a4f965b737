// The RocketMQ 4 Java client (org.apache.rocketmq:rocketmq-client 5.5.0) across a retention
// boundary, driven by broker/tests/retention_clients.rs (which starts and restarts the broker
// and checks what this prints):
//
//   java -cp <jars>:<classes> V4Retention <namesrv> send TOPIC COUNT PREFIX SIZE
//       prints one `SENT <bodyId> <msgId> <queueId> <queueOffset>` line per message
//   java -cp <jars>:<classes> V4Retention <namesrv> pull TOPIC GROUP MAX IDLE_MS
//       a DefaultLitePullConsumer of GROUP (CONSUME_FROM_FIRST_OFFSET, offsets committed by
//       the client as it polls): polls until MAX messages came or none for IDLE_MS, prints one
//       `GOT <bodyId> <msgId> <queueId> <queueOffset>` line per message polled, then shuts
//       down (which commits the group's offsets to the broker)
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class V4Retention {
    public static void main(String[] args) {
        String ns = args[0];
        try {
            switch (args[1]) {
                case "send": send(ns, args[2], Integer.parseInt(args[3]), args[4], Integer.parseInt(args[5])); break;
                case "pull": pull(ns, args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5])); break;
                default:
                    System.out.println("FAIL: unknown command " + args[1]);
                    System.exit(1);
            }
        } catch (Exception e) {
            // The client's threads would keep the JVM up: exit, failing.
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    static void send(String ns, String topic, int count, String prefix, int size) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("RetentionProducer");
        p.setNamesrvAddr(ns);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        StringBuilder pad = new StringBuilder();
        while (pad.length() < size) {
            pad.append('x');
        }
        for (int i = 0; i < count; i++) {
            String id = prefix + i;
            SendResult r = p.send(new Message(topic, "T", (id + " " + pad).getBytes(StandardCharsets.UTF_8)));
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                System.out.println("FAIL: send " + r);
                System.exit(1);
            }
            System.out.println("SENT " + id + " " + r.getMsgId() + " " + r.getMessageQueue().getQueueId() + " " + r.getQueueOffset());
        }
        p.shutdown();
    }

    static void pull(String ns, String topic, String group, int max, long idleMs) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(10);
        c.subscribe(topic, "*");
        c.start();
        int got = 0;
        long last = System.currentTimeMillis();
        while (got < max && System.currentTimeMillis() - last < idleMs) {
            List<MessageExt> batch = c.poll(500);
            for (MessageExt m : batch) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                System.out.println("GOT " + body.split(" ", 2)[0] + " " + m.getMsgId() + " " + m.getQueueId() + " " + m.getQueueOffset());
                got++;
                last = System.currentTimeMillis();
            }
        }
        c.commitSync();
        c.shutdown();
    }
}
