// RemotingSlave is a minimal RocketMQ slave's SlaveSynchronize over the
// remoting protocol, written from replicator's protocol description
// (rocketmq-ha-spec.md section 8, docs/protocol.md "RocketMQ remoting
// (metadata)"), not from RocketMQ's code, as an independent second
// implementation for the interop tests. It shares RemotingMaster.Codec.
//
//   java RemotingSlave HOST:PORT [--serialize json|rocketmq]
//   java RemotingSlave --namesrv HOST:PORT [--cluster C] [--broker-name B]
//       [--broker-id N] [--self ADDR] [--register-ms N] [--serialize ...]
//
// With --namesrv it first finds its master as a RocketMQ slave does: it
// registers with the name server (REGISTER_BROKER, 103, as broker id N of
// C/B at address --self, HA address --self's port + 1, an empty topic
// table, version 401) every --register-ms until the answer carries
// masterAddr ("registered MASTER HA"), then reads topics (21) and timer
// metrics (61) at masterAddr's port - 2 (the VIP channel, "vip ADDR") and
// the other documents at masterAddr, as BrokerOuterAPI does.
//
// On one connection it sends, as a Java broker would (language JAVA), the
// requests GET_ALL_TOPIC_CONFIG (21), GET_ALL_CONSUMER_OFFSET (43),
// GET_ALL_DELAY_OFFSET (45), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
// GET_ALL_MESSAGE_REQUEST_MODE (402), GET_TIMER_METRICS (61) and one code no
// broker serves to a slave (310, SEND_MESSAGE_V2), and reads each body the way RocketMQ's
// wrappers take it: TopicConfigSerializeWrapper (a dataVersion with three
// integers; a topicConfigTable whose entries carry their own topicName),
// ConsumerOffsetSerializeWrapper (offsetTable: "topic@group" -> {Integer
// queueId: Long offset}), the delay offsets' offsetTable ({Integer level:
// Long offset}), SubscriptionGroupWrapper (dataVersion, subscriptionGroupTable
// entries with their groupName), MessageRequestModeSerializeWrapper,
// TimerMetricsSerializeWrapper (dataVersion, timingCount: topic -> {count,
// timeStamp}).
//
// Checks, each fatal (a line "error ..." and exit status 2): a response
// without the response flag, with another opaque or serialisation than its
// request, a code other than SUCCESS (REQUEST_CODE_NOT_SUPPORTED is allowed
// for 402 and 61, a 4.x master, and SYSTEM_ERROR for 61, a master without a
// timer store), a body those wrappers cannot read, and anything
// but REQUEST_CODE_NOT_SUPPORTED with the remark " request type 310 not
// supported" for code 310.
//
// Standard output, one event per line: "topic NAME READ WRITE PERM",
// "version topics|offsets|groups STATE TIMESTAMP COUNTER", "offset KEY QUEUE
// OFFSET", "delay LEVEL OFFSET", "group NAME", "requestmode TOPIC GROUP MODE"
// or "requestmode unsupported", "timer TOPIC COUNT" or "timer unsupported",
// "unsupported 310", "done".

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Map;

public final class RemotingSlave {
    static final PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] args) {
        try {
            run(args);
            out.println("done");
        } catch (Exception e) {
            out.println("error " + e.getMessage());
            System.exit(2);
        }
    }

    static int opaque;

    static void run(String[] args) throws Exception {
        String direct = null;
        int i = 0;
        if (args.length > 0 && !args[0].startsWith("--")) {
            direct = args[0];
            i = 1;
        }
        int serialize = 0;
        String namesrv = null, cluster = "DefaultCluster", brokerName = "broker-a", self = "127.0.0.1:1";
        long brokerId = 1, registerMs = 1000;
        for (; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--serialize": serialize = args[i + 1].equals("rocketmq") ? 1 : 0; break;
                case "--namesrv": namesrv = args[i + 1]; break;
                case "--cluster": cluster = args[i + 1]; break;
                case "--broker-name": brokerName = args[i + 1]; break;
                case "--broker-id": brokerId = Long.parseLong(args[i + 1]); break;
                case "--self": self = args[i + 1]; break;
                case "--register-ms": registerMs = Long.parseLong(args[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (i != args.length || (direct == null) == (namesrv == null)) throw new IllegalArgumentException(USAGE);
        String mainAddr = direct, vipAddr = direct;
        if (namesrv != null) {
            mainAddr = register(namesrv, cluster, brokerName, brokerId, self, registerMs);
            int colon = mainAddr.lastIndexOf(':');
            // MixAll.brokerVIPChannel: topics (and timer documents) are read at listenPort - 2.
            vipAddr = mainAddr.substring(0, colon) + ":" + (Integer.parseInt(mainAddr.substring(colon + 1)) - 2);
            out.println("vip " + vipAddr);
        }
        try (Conn main = new Conn(mainAddr); Conn vip = vipAddr.equals(mainAddr) ? null : new Conn(vipAddr)) {
            Conn topicConn = vip == null ? main : vip;
            DataInputStream in = main.in;
            OutputStream os = main.os;

            Map<?, ?> topics = object(call(topicConn.in, topicConn.os, 21, serialize), "topic config");
            version("topics", topics.get("dataVersion"));
            for (Map.Entry<?, ?> e : map(topics.get("topicConfigTable"), "topicConfigTable").entrySet()) {
                Map<?, ?> tc = map(e.getValue(), "TopicConfig " + e.getKey());
                if (!e.getKey().equals(tc.get("topicName"))) throw new IOException("TopicConfig " + e.getKey() + " has topicName " + tc.get("topicName"));
                out.println("topic " + e.getKey() + " " + intOr(tc.get("readQueueNums"), 16) + " " + intOr(tc.get("writeQueueNums"), 16) + " " + intOr(tc.get("perm"), 6));
            }

            Map<?, ?> offsets = object(call(in, os, 43, serialize), "consumer offsets");
            if (offsets.containsKey("dataVersion")) version("offsets", offsets.get("dataVersion"));
            for (Map.Entry<?, ?> e : map(offsets.get("offsetTable"), "offsetTable").entrySet()) {
                String key = (String) e.getKey();
                if (key.indexOf('@') < 0) throw new IOException("offsetTable key " + key + " is not topic@group");
                for (Map.Entry<?, ?> q : map(e.getValue(), "offsets of " + key).entrySet()) {
                    out.println("offset " + key + " " + Integer.parseInt((String) q.getKey()) + " " + longOf(q.getValue(), "offset"));
                }
            }

            Map<?, ?> delay = object(call(in, os, 45, serialize), "delay offsets");
            for (Map.Entry<?, ?> e : map(delay.get("offsetTable"), "delay offsetTable").entrySet()) {
                out.println("delay " + Integer.parseInt((String) e.getKey()) + " " + longOf(e.getValue(), "delay offset"));
            }

            Map<?, ?> groups = object(call(in, os, 201, serialize), "subscription groups");
            version("groups", groups.get("dataVersion"));
            for (Map.Entry<?, ?> e : map(groups.get("subscriptionGroupTable"), "subscriptionGroupTable").entrySet()) {
                Map<?, ?> g = map(e.getValue(), "SubscriptionGroupConfig " + e.getKey());
                if (!e.getKey().equals(g.get("groupName"))) throw new IOException("group " + e.getKey() + " has groupName " + g.get("groupName"));
                out.println("group " + e.getKey());
            }

            RemotingMaster.Codec.Command modes = request(in, os, 402, serialize);
            if (modes.code == 3) {
                out.println("requestmode unsupported");
            } else if (modes.code != 0) {
                throw new IOException("GET_ALL_MESSAGE_REQUEST_MODE answered " + modes.code + " " + modes.remark);
            } else {
                Map<?, ?> m = object(modes.body, "message request modes");
                for (Map.Entry<?, ?> t : map(m.get("messageRequestModeMap"), "messageRequestModeMap").entrySet()) {
                    for (Map.Entry<?, ?> g : map(t.getValue(), "modes of " + t.getKey()).entrySet()) {
                        out.println("requestmode " + t.getKey() + " " + g.getKey() + " " + map(g.getValue(), "mode").get("mode"));
                    }
                }
            }

            RemotingMaster.Codec.Command timers = request(topicConn.in, topicConn.os, 61, serialize);
            if (timers.code == 3 || timers.code == 1) {
                out.println("timer unsupported");
            } else if (timers.code != 0) {
                throw new IOException("GET_TIMER_METRICS answered " + timers.code + " " + timers.remark);
            } else {
                Map<?, ?> m = object(timers.body, "timer metrics");
                version("timers", m.get("dataVersion"));
                for (Map.Entry<?, ?> e : map(m.get("timingCount"), "timingCount").entrySet()) {
                    Map<?, ?> metric = map(e.getValue(), "timer metric " + e.getKey());
                    longOf(metric.get("timeStamp"), "timeStamp");
                    out.println("timer " + e.getKey() + " " + longOf(metric.get("count"), "count"));
                }
            }

            RemotingMaster.Codec.Command other = request(in, os, 310, serialize);
            if (other.code != 3 || !" request type 310 not supported".equals(other.remark)) {
                throw new IOException("code 310 answered " + other.code + " remark " + other.remark);
            }
            out.println("unsupported 310");
        }
    }

    static final String USAGE = "usage: RemotingSlave HOST:PORT [--serialize json|rocketmq] | RemotingSlave --namesrv HOST:PORT [--cluster C] [--broker-name B] [--broker-id N] [--self ADDR] [--register-ms N] [--serialize json|rocketmq]";

    /** One connection to a broker's remoting port. */
    static final class Conn implements AutoCloseable {
        final Socket s = new Socket();
        final DataInputStream in;
        final OutputStream os;

        Conn(String addr) throws IOException {
            int colon = addr.lastIndexOf(':');
            s.connect(new InetSocketAddress(addr.substring(0, colon), Integer.parseInt(addr.substring(colon + 1))), 5000);
            s.setSoTimeout(10000);
            s.setTcpNoDelay(true);
            in = new DataInputStream(s.getInputStream());
            os = s.getOutputStream();
        }

        @Override
        public void close() throws IOException {
            s.close();
        }
    }

    /**
     * Registers as a slave broker with the name server every registerMs (a
     * broker's registerNameServerPeriod) until an answer carries masterAddr,
     * as BrokerController does before SlaveSynchronize has an address; at
     * most 30 s. Prints "registered MASTER HA" and returns masterAddr.
     */
    static String register(String namesrv, String cluster, String brokerName, long brokerId, String self, long registerMs) throws Exception {
        int colon = self.lastIndexOf(':');
        String ha = self.substring(0, colon) + ":" + (Integer.parseInt(self.substring(colon + 1)) + 1);
        byte[] body = ("{\"filterServerList\":[],\"topicConfigSerializeWrapper\":{\"dataVersion\":{\"counter\":0,\"stateVersion\":0,\"timestamp\":0},\"topicConfigTable\":{}}}").getBytes(StandardCharsets.UTF_8);
        java.util.zip.CRC32 crc = new java.util.zip.CRC32();
        crc.update(body);
        long deadline = System.currentTimeMillis() + 30000;
        try (Conn c = new Conn(namesrv)) {
            while (true) {
                RemotingMaster.Codec.Command req = new RemotingMaster.Codec.Command();
                req.code = 103;
                req.opaque = ++opaque;
                req.version = 401; // V4_9_4: a 4.9 broker
                req.extFields.put("brokerAddr", self);
                req.extFields.put("brokerId", Long.toString(brokerId));
                req.extFields.put("brokerName", brokerName);
                req.extFields.put("clusterName", cluster);
                req.extFields.put("haServerAddr", ha);
                req.extFields.put("compressed", "false");
                req.extFields.put("bodyCrc32", Integer.toString((int) (crc.getValue() & 0x7FFFFFFF)));
                req.body = body;
                c.os.write(RemotingMaster.Codec.encode(req));
                c.os.flush();
                RemotingMaster.Codec.Command resp = RemotingMaster.Codec.read(c.in, 16 << 20);
                if ((resp.flag & 1) == 0 || resp.opaque != req.opaque) throw new IOException("bad answer to REGISTER_BROKER");
                if (resp.code != 0) throw new IOException("REGISTER_BROKER answered " + resp.code + " " + resp.remark);
                String master = resp.extFields.get("masterAddr");
                if (master != null) {
                    out.println("registered " + master + " " + resp.extFields.get("haServerAddr"));
                    return master;
                }
                if (System.currentTimeMillis() > deadline) throw new IOException("no masterAddr from the name server in 30 s");
                Thread.sleep(registerMs);
            }
        }
    }

    static RemotingMaster.Codec.Command request(DataInputStream in, OutputStream os, int code, int serialize) throws IOException {
        RemotingMaster.Codec.Command req = new RemotingMaster.Codec.Command();
        req.code = code;
        req.opaque = ++opaque;
        req.serialize = serialize;
        req.version = 0;
        os.write(RemotingMaster.Codec.encode(req));
        os.flush();
        RemotingMaster.Codec.Command resp = RemotingMaster.Codec.read(in, 16 << 20);
        if ((resp.flag & 1) == 0) throw new IOException("answer to " + code + " without the response flag");
        if (resp.opaque != req.opaque) throw new IOException("answer to " + code + " has opaque " + resp.opaque + ", want " + req.opaque);
        if (resp.serialize != serialize) throw new IOException("answer to " + code + " in serialize type " + resp.serialize + ", want " + serialize);
        return resp;
    }

    static byte[] call(DataInputStream in, OutputStream os, int code, int serialize) throws IOException {
        RemotingMaster.Codec.Command resp = request(in, os, code, serialize);
        if (resp.code != 0) throw new IOException("request " + code + " answered " + resp.code + " " + resp.remark);
        if (resp.body.length == 0) throw new IOException("request " + code + " answered SUCCESS without a body");
        return resp.body;
    }

    static Map<?, ?> object(byte[] body, String what) throws IOException {
        Object o = new RemotingMaster.Codec.Json(new String(body, StandardCharsets.UTF_8)).parseAll();
        return map(o, what);
    }

    static Map<?, ?> map(Object o, String what) throws IOException {
        if (!(o instanceof Map)) throw new IOException(what + " is not an object: " + o);
        return (Map<?, ?>) o;
    }

    static long longOf(Object o, String what) throws IOException {
        if (!(o instanceof Long)) throw new IOException(what + " is not an integer: " + o);
        return (Long) o;
    }

    static long intOr(Object o, long dflt) throws IOException {
        return o == null ? dflt : longOf(o, "queue count or perm");
    }

    static void version(String what, Object o) throws IOException {
        Map<?, ?> v = map(o, what + " dataVersion");
        out.println("version " + what + " " + longOf(v.get("stateVersion"), "stateVersion") + " " + longOf(v.get("timestamp"), "timestamp") + " " + longOf(v.get("counter"), "counter"));
    }
}
