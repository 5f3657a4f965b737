// A producer on the RocketMQ 4 Java client (org.apache.rocketmq:rocketmq-client 5.5.0,
// unmodified) for the cluster kill test (broker/tests/cluster_clients.rs). It finds the master
// through the name servers of every node (GET_ROUTEINFO_BY_TOPIC names the group's current
// master), sends until the file STOP exists, and writes the same ledger lines as
// producer.py on stdout (ACK, HALF, ROLLBACK, FAIL, CHECK; times in Unix ms). A v4
// transaction is ended oneway: the client never learns whether the commit arrived, so a
// committed transaction is a HALF line, resolved by END_TRANSACTION or by the master's check;
// every 16th (`-O`) is left UNKNOW, for the check alone.
//
//   java -cp <jars>:<classes> V4Producer <namesrv;namesrv;...> <topic> <prefix> <stop file>
import java.io.File;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class V4Producer {
    static synchronized void line(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static LocalTransactionState decide(String body) {
        return body.endsWith("-R") ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.COMMIT_MESSAGE;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0], topic = args[1], prefix = args[2];
        File stop = new File(args[3]);
        TransactionMQProducer p = new TransactionMQProducer("ClusterV4Producer");
        p.setNamesrvAddr(ns);
        // The client's own knobs: 3 s per send, and two more tries after a failure. Routes
        // are polled at the client's default, every 30 s, unless POLL_NS_MS says otherwise:
        // after a failover its sends reach the old master's address, a replica that passes
        // them on to the new master (broker/src/cluster/forward_remoting.rs).
        String poll = System.getenv("POLL_NS_MS");
        if (poll != null) {
            p.setPollNameServerInterval(Integer.parseInt(poll));
        }
        p.setSendMsgTimeout(3000);
        p.setRetryTimesWhenSendFailed(2);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String body = new String(msg.getBody());
                // `-O`: left open, for the broker's check (which commits it).
                return body.endsWith("-O") ? LocalTransactionState.UNKNOW : decide(body);
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String body = new String(msg.getBody());
                LocalTransactionState s = decide(body);
                line("CHECK " + body + " " + (s == LocalTransactionState.ROLLBACK_MESSAGE ? "ROLLBACK" : "COMMIT"));
                return s;
            }
        });
        p.start();
        line("STARTED " + System.currentTimeMillis());
        long n = 0;
        while (!stop.exists()) {
            n++;
            String kind = n % 4 != 0 ? "N" : (n % 8 == 0 ? "R" : (n % 16 == 4 ? "O" : "C"));
            String body = String.format("%s-%07d-%s", prefix, n, kind);
            Message m = new Message(topic, body.getBytes());
            m.setKeys(body);
            try {
                if (kind.equals("N")) {
                    SendResult r = p.send(m);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        line("ACK " + body + " " + System.currentTimeMillis());
                    } else {
                        line("FAIL " + body + " " + System.currentTimeMillis() + " " + r.getSendStatus());
                    }
                    continue;
                }
                if (kind.equals("R")) {
                    line("ROLLBACK " + body);
                }
                TransactionSendResult r = p.sendMessageInTransaction(m, null);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    line("FAIL " + body + " " + System.currentTimeMillis() + " " + r.getSendStatus());
                } else if (!kind.equals("R")) {
                    line("HALF " + body + " " + System.currentTimeMillis());
                }
            } catch (Exception e) {
                String why = e instanceof org.apache.rocketmq.client.exception.MQBrokerException
                    ? "code=" + ((org.apache.rocketmq.client.exception.MQBrokerException) e).getResponseCode()
                    : String.valueOf(e.getMessage()).replaceAll("\\s+", "_");
                line("FAIL " + body + " " + System.currentTimeMillis() + " " + e.getClass().getSimpleName() + " " + why.substring(0, Math.min(160, why.length())));
                Thread.sleep(20);
            }
        }
        // Stay up so the master can check what is still open.
        Thread.sleep(Long.parseLong(System.getenv().getOrDefault("LINGER_S", "0")) * 1000);
        p.shutdown();
        line("DONE " + n);
    }
}
