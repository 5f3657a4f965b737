// SQL92 filters with the official v4 Java client (rocketmq-client 5.5.0), driven by
// broker/tests/sql92.rs (issue 34, item 2): the same program runs against rocklet and against
// Apache RocketMQ, and the test compares what each delivered.
//
//   java V4Sql NAMESRV TOPIC IDLE_MS N MESSAGE×N EXPRESSION…
//
// Sends the N messages with a DefaultMQProducer (each MESSAGE is `body|tag|keys|k=v,k=v`, empty
// parts for none), then reads TOPIC with one DefaultLitePullConsumer per EXPRESSION
// (`MessageSelector.bySql`, group SqlG<i>-<topic>, from the first offset) until none has
// received anything for IDLE_MS, and prints `GOT <i> <body>` for each delivery,
// `REFUSED <i> <message>` for a consumer whose subscription the broker refused.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class V4Sql {
    public static void main(String[] args) {
        try {
            String ns = args[0];
            String topic = args[1];
            long idleMs = Long.parseLong(args[2]);
            int n = Integer.parseInt(args[3]);
            List<String> messages = new ArrayList<>();
            List<String> exprs = new ArrayList<>();
            for (int i = 4; i < args.length; i++) {
                (i < 4 + n ? messages : exprs).add(args[i]);
            }
            send(ns, topic, messages);
            pull(ns, topic, exprs, idleMs);
        } catch (Throwable t) {
            System.out.println("FAIL: " + t);
            t.printStackTrace(System.out);
            System.exit(1);
        }
        System.exit(0);
    }

    static void send(String ns, String topic, List<String> messages) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("SqlProducer");
        p.setNamesrvAddr(ns);
        p.start();
        for (String spec : messages) {
            String[] f = spec.split("\\|", -1);
            Message m = new Message(topic, f[0].getBytes(StandardCharsets.UTF_8));
            if (!f[1].isEmpty()) {
                m.setTags(f[1]);
            }
            if (!f[2].isEmpty()) {
                m.setKeys(f[2]);
            }
            if (!f[3].isEmpty()) {
                for (String kv : f[3].split(",")) {
                    String[] e = kv.split("=", 2);
                    m.putUserProperty(e[0], e[1]);
                }
            }
            SendResult r = p.send(m);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("send " + r);
            }
        }
        p.shutdown();
    }

    static void pull(String ns, String topic, List<String> exprs, long idleMs) throws Exception {
        List<DefaultLitePullConsumer> consumers = new ArrayList<>();
        for (int i = 0; i < exprs.size(); i++) {
            DefaultLitePullConsumer c = new DefaultLitePullConsumer("SqlG" + i + "-" + topic);
            c.setNamesrvAddr(ns);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.setPollTimeoutMillis(100);
            try {
                c.subscribe(topic, MessageSelector.bySql(exprs.get(i)));
                c.start();
                consumers.add(c);
            } catch (Exception e) {
                System.out.println("REFUSED " + i + " " + e.getMessage().split("\n")[0]);
                consumers.add(null);
            }
        }
        long last = System.currentTimeMillis();
        while (System.currentTimeMillis() - last < idleMs) {
            for (int i = 0; i < consumers.size(); i++) {
                DefaultLitePullConsumer c = consumers.get(i);
                if (c == null) {
                    continue;
                }
                for (MessageExt m : c.poll(100)) {
                    System.out.println("GOT " + i + " " + new String(m.getBody(), StandardCharsets.UTF_8));
                    last = System.currentTimeMillis();
                }
            }
        }
        for (DefaultLitePullConsumer c : consumers) {
            if (c != null) {
                c.shutdown();
            }
        }
    }
}
