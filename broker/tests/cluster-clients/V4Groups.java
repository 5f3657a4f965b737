// The RocketMQ 4 Java client (org.apache.rocketmq:rocketmq-client 5.5.0, unmodified) for the
// several-groups test (broker/tests/cluster_groups.rs). It finds the topic's groups through
// the name servers it is given (GET_ROUTEINFO_BY_TOPIC names each hosting group's master).
// One line per outcome on stdout, as groups.py writes them:
//
//   send NAMESRVS TOPIC PREFIX COUNT
//       ACK <body> <broker name>    a message acknowledged, and the group it went to
//       FAIL <body> <error>         a send that failed
//   receive NAMESRVS TOPIC GROUP COUNT SECONDS
//       GOT <body>                  a message received by a lite pull consumer (offsets
//                                   committed by the client), until COUNT bodies were seen
//                                   or SECONDS passed
//
//   java -cp <jars>:<classes> V4Groups send|receive <namesrv;namesrv;...> ...
import java.util.HashSet;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class V4Groups {
    static void line(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static void send(String ns, String topic, String prefix, int count) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("ClusterV4Groups");
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(3000);
        p.start();
        try {
            for (int n = 0; n < count; n++) {
                String body = String.format("%s-%05d", prefix, n);
                try {
                    SendResult r = p.send(new Message(topic, body.getBytes()));
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        line("ACK " + body + " " + r.getMessageQueue().getBrokerName());
                    } else {
                        line("FAIL " + body + " " + r.getSendStatus());
                    }
                } catch (Exception e) {
                    line("FAIL " + body + " " + String.valueOf(e.getMessage()).replaceAll("\\s+", "_"));
                }
            }
        } finally {
            p.shutdown();
        }
    }

    static void receive(String ns, String topic, String group, int count, int seconds) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        try {
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (MessageExt m : c.poll(1000)) {
                    String body = new String(m.getBody());
                    if (seen.add(body)) {
                        line("GOT " + body);
                    }
                }
            }
        } finally {
            c.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "send":
                send(args[1], args[2], args[3], Integer.parseInt(args[4]));
                break;
            case "receive":
                receive(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
                break;
            default:
                System.err.println("unknown command " + args[0] + ": expected send or receive");
                System.exit(2);
        }
        System.exit(0);
    }
}
