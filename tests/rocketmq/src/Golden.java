// Record-format golden checks with Apache RocketMQ 5.5.0's own code (rocketmq-store,
// rocketmq-common), both ways; run by tests/ci/import.sh.
//
//   java Golden write <storeRoot> <appendPropCRC> <expected.jsonl>
//       An embedded DefaultMessageStore (RocketMQ's CommitLog and MessageExtEncoder) writes
//       normal messages, a batch, IPv6 hosts, a zlib-compressed body, a topic longer than 127
//       bytes (MESSAGE_MAGIC_CODE_V2), an inner batch (BatchCQ topic), a half and a commit
//       record, and enough 10 KiB bodies to fill 64 KiB files (blanks). Then RocketMQ's
//       MessageDecoder reads every record back into expected.jsonl, which
//       broker/tests/rocketmq_golden.rs compares with Rocklet's decoder field by field.
//   java Golden check <segmentDir> <minUserRecords>
//       Every record of a Rocklet segment directory must pass
//       CommitLog.checkMessageAndReturnSize with checkCRC and forceVerifyPropCRC=true (the
//       whole-record __CRC32# property); prints the counts.
import java.io.File;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;

public class Golden {
    static final int BLANK_MAGIC = 0xCBD43194;
    static final InetSocketAddress BORN = new InetSocketAddress("10.0.0.9", 40000);
    static final InetSocketAddress STORE = new InetSocketAddress("10.0.0.1", 10911);

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
            case "write":
                write(a[1], Boolean.parseBoolean(a[2]), a[3]);
                break;
            case "check":
                check(new File(a[1]), Integer.parseInt(a[2]));
                break;
            default:
                throw new IllegalArgumentException("write | check");
        }
    }

    static MessageStoreConfig config(String root) {
        MessageStoreConfig c = new MessageStoreConfig();
        c.setStorePathRootDir(root);
        c.setStorePathCommitLog(root + File.separator + "commitlog");
        c.setMappedFileSizeCommitLog(64 * 1024);
        c.setMappedFileSizeConsumeQueue(20 * 1024);
        c.setMaxHashSlotNum(100);
        c.setMaxIndexNum(1000);
        c.setFlushDiskType(FlushDiskType.SYNC_FLUSH);
        c.setHaListenPort(0);
        return c;
    }

    static MessageExtBrokerInner inner(String topic, int queue, byte[] body, Message m) {
        MessageExtBrokerInner i = new MessageExtBrokerInner();
        i.setTopic(topic);
        i.setQueueId(queue);
        i.setBody(body);
        i.setFlag(m.getFlag());
        MessageClientIDSetter.setUniqID(m);
        MessageAccessor.setProperties(i, m.getProperties());
        i.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
        i.setTagsCode(m.getTags() == null ? 0 : m.getTags().hashCode());
        i.setBornTimestamp(System.currentTimeMillis());
        i.setBornHost(BORN);
        i.setStoreHost(STORE);
        return i;
    }

    static void put(DefaultMessageStore s, MessageExtBrokerInner m) throws Exception {
        PutMessageResult r = s.asyncPutMessage(m).get();
        if (!r.isOk()) {
            throw new IllegalStateException("put " + m.getTopic() + ": " + r.getPutMessageStatus());
        }
    }

    static void write(String root, boolean crc, String out) throws Exception {
        MessageStoreConfig c = config(root);
        c.setEnabledAppendPropCRC(crc);
        ConcurrentHashMap<String, TopicConfig> topics = new ConcurrentHashMap<>();
        TopicConfig batchCq = new TopicConfig("GoldenInner", 1, 1);
        batchCq.getAttributes().put("queue.type", "BatchCQ");
        topics.put("GoldenInner", batchCq);
        DefaultMessageStore s = new DefaultMessageStore(c, null, null, new BrokerConfig(), topics);
        if (!s.load()) {
            throw new IllegalStateException("load failed");
        }
        s.start();
        for (int i = 0; i < 10; i++) {
            Message m = new Message("GoldenTopic", i % 2 == 0 ? "TagA" : "TagB", "k" + i + " shared", ("golden-" + i).getBytes());
            m.putUserProperty("seq", String.valueOf(i));
            m.setFlag(i);
            put(s, inner("GoldenTopic", i % 4, m.getBody(), m));
        }
        // A batch: RocketMQ splits it into one record per message, at consecutive offsets.
        List<Message> msgs = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            Message m = new Message("GoldenTopic", "TagC", ("batch-" + i).getBytes());
            MessageClientIDSetter.setUniqID(m);
            msgs.add(m);
        }
        MessageExtBatch batch = new MessageExtBatch();
        batch.setTopic("GoldenTopic");
        batch.setQueueId(1);
        batch.setBody(MessageDecoder.encodeMessages(msgs));
        batch.putUserProperty("batchProp", "yes");
        batch.setBornTimestamp(System.currentTimeMillis());
        batch.setBornHost(BORN);
        batch.setStoreHost(STORE);
        if (!s.putMessages(batch).isOk()) {
            throw new IllegalStateException("batch");
        }
        // IPv6 born and store hosts.
        Message v6 = new Message("GoldenTopic", "TagV6", "v6".getBytes());
        MessageExtBrokerInner i6 = inner("GoldenTopic", 2, v6.getBody(), v6);
        i6.setBornHost(new InetSocketAddress("::1", 126));
        i6.setStoreHost(new InetSocketAddress("1050:0:0:0:5:600:300c:326b", 125));
        i6.setBornHostV6Flag();
        i6.setStoreHostAddressV6Flag();
        put(s, i6);
        // A zlib-compressed body, flagged as the Java client flags it.
        byte[] plain = new byte[100 * 1024];
        for (int i = 0; i < plain.length; i++) {
            plain[i] = (byte) "compressible ".charAt(i % 13);
        }
        Message z = new Message("GoldenTopic", "TagZ", plain);
        MessageExtBrokerInner iz = inner("GoldenTopic", 3, CompressorFactory.getCompressor(CompressionType.ZLIB).compress(plain, 5), z);
        iz.setSysFlag(MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB_TYPE);
        put(s, iz);
        // A topic longer than 127 bytes: MESSAGE_MAGIC_CODE_V2.
        String longTopic = "GoldenLong" + "x".repeat(130);
        Message l = new Message(longTopic, "TagL", "long-topic".getBytes());
        put(s, inner(longTopic, 0, l.getBody(), l));
        // An inner batch: one record, INNER_BATCH | NEED_UNWRAP, INNER_NUM messages.
        List<Message> innerMsgs = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Message m = new Message("GoldenInner", "TagI", ("inner-" + i).getBytes());
            MessageClientIDSetter.setUniqID(m);
            innerMsgs.add(m);
        }
        MessageExtBatch ib = new MessageExtBatch();
        ib.setTopic("GoldenInner");
        ib.setQueueId(0);
        ib.setBody(MessageDecoder.encodeMessages(innerMsgs));
        ib.setSysFlag(MessageSysFlag.INNER_BATCH_FLAG | MessageSysFlag.NEED_UNWRAP_FLAG);
        ib.setInnerBatch(true);
        MessageClientIDSetter.setUniqID(ib);
        MessageAccessor.putProperty(ib, MessageConst.PROPERTY_INNER_NUM, "3");
        ib.setPropertiesString(MessageDecoder.messageProperties2String(ib.getProperties()));
        ib.setBornTimestamp(System.currentTimeMillis());
        ib.setBornHost(BORN);
        ib.setStoreHost(STORE);
        put(s, ib);
        // A half message and a commit record, as the broker's transaction path writes them.
        Message h = new Message("GoldenTopic", "TagT", "half".getBytes());
        MessageExtBrokerInner ih = inner("RMQ_SYS_TRANS_HALF_TOPIC", 0, h.getBody(), h);
        MessageAccessor.putProperty(ih, MessageConst.PROPERTY_REAL_TOPIC, "GoldenTopic");
        MessageAccessor.putProperty(ih, MessageConst.PROPERTY_REAL_QUEUE_ID, "0");
        MessageAccessor.putProperty(ih, MessageConst.PROPERTY_PRODUCER_GROUP, "GoldenTxn");
        MessageAccessor.putProperty(ih, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
        ih.setPropertiesString(MessageDecoder.messageProperties2String(ih.getProperties()));
        ih.setSysFlag(MessageSysFlag.TRANSACTION_PREPARED_TYPE);
        put(s, ih);
        // Large bodies: the 64 KiB files fill up and end in blanks.
        for (int i = 0; i < 12; i++) {
            byte[] b = new byte[10 * 1024];
            Arrays.fill(b, (byte) ('a' + i));
            Message m = new Message("GoldenTopic", "TagBig", b);
            put(s, inner("GoldenTopic", i % 4, b, m));
        }
        s.shutdown();
        expect(new File(root, "commitlog"), out);
    }

    static String hex(byte[] bytes) {
        StringBuilder b = new StringBuilder();
        for (byte x : bytes) {
            b.append(Character.forDigit((x >> 4) & 15, 16)).append(Character.forDigit(x & 15, 16));
        }
        return b.toString();
    }

    static String host(java.net.SocketAddress a) {
        InetSocketAddress s = (InetSocketAddress) a;
        return hex(s.getAddress().getAddress()) + ":" + s.getPort();
    }

    /** Every record of the commit log as RocketMQ's MessageDecoder reads it. */
    static void expect(File dir, String out) throws Exception {
        File[] files = dir.listFiles();
        Arrays.sort(files);
        int records = 0;
        int blanks = 0;
        try (PrintWriter w = new PrintWriter(out)) {
            for (File f : files) {
                ByteBuffer bb = ByteBuffer.wrap(Files.readAllBytes(f.toPath()));
                long base = Long.parseLong(f.getName());
                while (bb.remaining() >= 8) {
                    int pos = bb.position();
                    int size = bb.getInt(pos);
                    int magic = bb.getInt(pos + 4);
                    if (size == 0) {
                        break;
                    }
                    if (magic == BLANK_MAGIC) {
                        blanks++;
                        break;
                    }
                    MessageExt m = MessageDecoder.decode(bb, true, false, false, false, true);
                    if (m == null) {
                        throw new IllegalStateException("MessageDecoder failed at " + (base + pos));
                    }
                    bb.position(pos + size);
                    records++;
                    StringBuilder p = new StringBuilder("{");
                    for (Map.Entry<String, String> e : new TreeMap<>(m.getProperties()).entrySet()) {
                        if (p.length() > 1) {
                            p.append(',');
                        }
                        p.append(Json.str(e.getKey())).append(':').append(Json.str(e.getValue()));
                    }
                    p.append('}');
                    w.println("{\"offset\":" + (base + pos) + ",\"size\":" + size
                        + ",\"v2\":" + (magic == 0xDAA320AB)
                        + ",\"topic\":" + Json.str(m.getTopic())
                        + ",\"queueId\":" + m.getQueueId()
                        + ",\"queueOffset\":" + m.getQueueOffset()
                        + ",\"physOffset\":" + m.getCommitLogOffset()
                        + ",\"flag\":" + m.getFlag()
                        + ",\"sysFlag\":" + m.getSysFlag()
                        + ",\"bornTimestamp\":" + m.getBornTimestamp()
                        + ",\"storeTimestamp\":" + m.getStoreTimestamp()
                        + ",\"bornHost\":" + Json.str(host(m.getBornHost()))
                        + ",\"storeHost\":" + Json.str(host(m.getStoreHost()))
                        + ",\"reconsumeTimes\":" + m.getReconsumeTimes()
                        + ",\"preparedOffset\":" + m.getPreparedTransactionOffset()
                        + ",\"bodyCrc\":" + m.getBodyCRC()
                        + ",\"body\":\"" + hex(m.getBody()) + "\""
                        + ",\"props\":" + p + "}");
                }
            }
        }
        System.out.println("golden write: " + records + " records, " + blanks + " blanks in " + files.length + " files -> " + out);
    }

    static void check(File dir, int minUser) throws Exception {
        MessageStoreConfig c = config(Files.createTempDirectory("golden-check").toString());
        c.setForceVerifyPropCRC(true);
        DefaultMessageStore s = new DefaultMessageStore(c, null, null, new BrokerConfig(), new ConcurrentHashMap<>());
        List<File> files = new ArrayList<>();
        for (File f : dir.listFiles()) {
            if (f.getName().matches("\\d{20}")) {
                files.add(f);
            }
        }
        files.sort(null);
        int records = 0;
        int user = 0;
        int blanks = 0;
        for (File f : files) {
            ByteBuffer bb = ByteBuffer.wrap(Files.readAllBytes(f.toPath()));
            long base = Long.parseLong(f.getName());
            while (bb.remaining() >= 8) {
                int pos = bb.position();
                if (bb.getInt(pos) == 0 && bb.getInt(pos + 4) == 0) {
                    break;
                }
                DispatchRequest d = s.getCommitLog().checkMessageAndReturnSize(bb, true, false, true);
                if (!d.isSuccess()) {
                    System.out.println("golden check FAILED at log offset " + (base + pos) + " in " + f);
                    System.exit(1);
                }
                if (d.getMsgSize() == 0) {
                    blanks++;
                    break;
                }
                if (d.getCommitLogOffset() != base + pos) {
                    System.out.println("golden check FAILED: record at " + (base + pos) + " says " + d.getCommitLogOffset());
                    System.exit(1);
                }
                records++;
                if (!d.getTopic().startsWith("rmq_sys_") && !d.getTopic().startsWith("RMQ_SYS_")
                    && !d.getTopic().equals("SCHEDULE_TOPIC_XXXX")) {
                    user++;
                }
                bb.position(pos + d.getMsgSize());
            }
        }
        System.out.println("golden check: " + records + " records (" + user + " user records) and " + blanks
            + " blanks in " + files.size() + " segment files pass CommitLog.checkMessageAndReturnSize(checkCRC, forceVerifyPropCRC=true)");
        if (user < minUser) {
            System.out.println("golden check FAILED: expected at least " + minUser + " user records");
            System.exit(1);
        }
    }
}
