// NameServer is a minimal RocketMQ name server's broker registry over the
// remoting protocol, written from replicator's protocol description
// (rocketmq-ha-spec.md sections 5.1 and 9, docs/protocol.md "Name-server
// registration"), not from RocketMQ's code, as an independent second
// implementation for the interop tests. It shares RemotingMaster.Codec.
//
//   java NameServer PORT [--expire-ms N]
//
// It answers REGISTER_BROKER (103) and UNREGISTER_BROKER (104) in the
// request's serialisation, keeping RouteInfoManager's tables: cluster ->
// broker names; broker name -> {broker id -> address}; address -> (last
// registration time, HA address). A registration puts its address under
// its id, removing that address from any other id of the group first (one
// address, one id: how a slave that became master moves to id 0). The
// answer to a broker id other than 0 carries masterAddr and haServerAddr of
// the group's id-0 broker when that one is registered and its last
// registration is younger than --expire-ms (120000, the name server's
// broker expiry); otherwise no ext fields. An unregistration removes the
// address from its group and the live table. Any other code gets
// REQUEST_CODE_NOT_SUPPORTED.
//
// Checks on REGISTER_BROKER (a failure prints "error ..." and answers
// SYSTEM_ERROR): the header fields brokerName, brokerAddr, clusterName,
// haServerAddr and brokerId present (brokerId a non-negative integer);
// bodyCrc32, when not 0, equal to the CRC-32 of the body masked with
// 0x7FFFFFFF ("crc32 not match", as RocketMQ); compressed not "true" (this
// peer reads JSON bodies only); from version 37 (V3_0_11) up, a body that
// reads as a RegisterBrokerBody (filterServerList an array,
// topicConfigSerializeWrapper with a dataVersion of three integers and a
// topicConfigTable whose entries carry their own topicName); below, as a
// bare TopicConfigSerializeWrapper.
//
// Standard output, one event per line: "listening PORT", "register CLUSTER
// NAME ID ADDR HA VERSION version S T C topics A,B,... master MASTER|-
// ha HA|-", "unregister CLUSTER NAME ID ADDR group {ID=ADDR, ...}",
// "unsupported CODE", "error ...".

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.zip.CRC32;

public final class NameServer {
    static final PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    static final class Live {
        long lastUpdate;
        String haServerAddr;
    }

    // RouteInfoManager's tables, guarded by the class lock.
    static final Map<String, TreeSet<String>> clusters = new HashMap<>();
    static final Map<String, TreeMap<Long, String>> groups = new HashMap<>();
    static final Map<String, Live> live = new HashMap<>();
    static long expireMs = 120000;

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: NameServer PORT [--expire-ms N]");
            System.exit(2);
        }
        for (int i = 1; i < args.length; i += 2) {
            if (args[i].equals("--expire-ms") && i + 1 < args.length) {
                expireMs = Long.parseLong(args[i + 1]);
            } else {
                throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        ServerSocket ss = new ServerSocket();
        ss.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), Integer.parseInt(args[0])));
        out.println("listening " + ss.getLocalPort());
        while (true) {
            Socket s = ss.accept();
            s.setTcpNoDelay(true);
            Thread t = new Thread(() -> serve(s));
            t.setDaemon(true);
            t.start();
        }
    }

    static void serve(Socket s) {
        try (s) {
            DataInputStream in = new DataInputStream(s.getInputStream());
            OutputStream os = s.getOutputStream();
            while (true) {
                RemotingMaster.Codec.Command req;
                try {
                    req = RemotingMaster.Codec.read(in, 16 << 20);
                } catch (EOFException e) {
                    return;
                }
                RemotingMaster.Codec.Command resp = new RemotingMaster.Codec.Command();
                resp.opaque = req.opaque;
                resp.flag = 1;
                resp.serialize = req.serialize;
                resp.version = req.version;
                try {
                    switch (req.code) {
                        case 103:
                            register(req, resp);
                            break;
                        case 104:
                            unregister(req, resp);
                            break;
                        default:
                            out.println("unsupported " + req.code);
                            resp.code = 3;
                            resp.remark = " request type " + req.code + " not supported";
                    }
                } catch (IOException e) {
                    out.println("error " + e.getMessage());
                    resp.code = 1;
                    resp.remark = e.getMessage();
                    resp.extFields.clear();
                }
                os.write(RemotingMaster.Codec.encode(resp));
                os.flush();
            }
        } catch (IOException e) {
            out.println("error connection: " + e.getMessage());
        }
    }

    static String field(RemotingMaster.Codec.Command req, String name) throws IOException {
        String v = req.extFields.get(name);
        if (v == null || v.isEmpty()) throw new IOException("REGISTER_BROKER/UNREGISTER_BROKER without " + name);
        return v;
    }

    static long brokerId(RemotingMaster.Codec.Command req) throws IOException {
        long id;
        try {
            id = Long.parseLong(field(req, "brokerId"));
        } catch (NumberFormatException e) {
            throw new IOException("brokerId " + req.extFields.get("brokerId") + " is not an integer");
        }
        if (id < 0) throw new IOException("brokerId " + id);
        return id;
    }

    static void register(RemotingMaster.Codec.Command req, RemotingMaster.Codec.Command resp) throws IOException {
        String cluster = field(req, "clusterName");
        String name = field(req, "brokerName");
        String addr = field(req, "brokerAddr");
        String ha = field(req, "haServerAddr");
        long id = brokerId(req);
        if ("true".equals(req.extFields.get("compressed"))) throw new IOException("compressed bodies are not read by this peer");
        String crcField = req.extFields.getOrDefault("bodyCrc32", "0");
        int want = Integer.parseInt(crcField);
        if (want != 0) {
            CRC32 crc = new CRC32();
            crc.update(req.body);
            int got = (int) (crc.getValue() & 0x7FFFFFFF);
            if (got != want) throw new IOException("crc32 not match");
        }
        Map<?, ?> wrapper;
        if (req.version >= 37) {
            Map<?, ?> body = RemotingSlave.object(req.body, "RegisterBrokerBody");
            if (!(body.get("filterServerList") instanceof List)) throw new IOException("RegisterBrokerBody without a filterServerList array");
            wrapper = RemotingSlave.map(body.get("topicConfigSerializeWrapper"), "topicConfigSerializeWrapper");
        } else {
            wrapper = RemotingSlave.object(req.body, "TopicConfigSerializeWrapper");
        }
        Map<?, ?> dv = RemotingSlave.map(wrapper.get("dataVersion"), "dataVersion");
        String version = RemotingSlave.longOf(dv.get("stateVersion"), "stateVersion") + " " + RemotingSlave.longOf(dv.get("timestamp"), "timestamp") + " " + RemotingSlave.longOf(dv.get("counter"), "counter");
        List<String> topics = new ArrayList<>();
        for (Map.Entry<?, ?> e : RemotingSlave.map(wrapper.get("topicConfigTable"), "topicConfigTable").entrySet()) {
            Map<?, ?> tc = RemotingSlave.map(e.getValue(), "TopicConfig " + e.getKey());
            if (!e.getKey().equals(tc.get("topicName"))) throw new IOException("TopicConfig " + e.getKey() + " has topicName " + tc.get("topicName"));
            topics.add((String) e.getKey());
        }
        String masterAddr = null, masterHa = null;
        synchronized (NameServer.class) {
            clusters.computeIfAbsent(cluster, k -> new TreeSet<>()).add(name);
            TreeMap<Long, String> addrs = groups.computeIfAbsent(name, k -> new TreeMap<>());
            addrs.entrySet().removeIf(e -> e.getValue().equals(addr) && e.getKey() != id);
            addrs.put(id, addr);
            Live l = new Live();
            l.lastUpdate = System.currentTimeMillis();
            l.haServerAddr = ha;
            live.put(addr, l);
            if (id != 0) {
                String m = addrs.get(0L);
                Live ml = m == null ? null : live.get(m);
                if (ml != null && System.currentTimeMillis() - ml.lastUpdate < expireMs) {
                    masterAddr = m;
                    masterHa = ml.haServerAddr;
                }
            }
        }
        if (masterAddr != null) {
            resp.extFields.put("masterAddr", masterAddr);
            resp.extFields.put("haServerAddr", masterHa);
        }
        resp.code = 0;
        out.println("register " + cluster + " " + name + " " + id + " " + addr + " " + ha + " " + req.version + " version " + version
            + " topics " + String.join(",", topics) + " master " + (masterAddr == null ? "-" : masterAddr) + " ha " + (masterHa == null ? "-" : masterHa));
    }

    static void unregister(RemotingMaster.Codec.Command req, RemotingMaster.Codec.Command resp) throws IOException {
        String cluster = field(req, "clusterName");
        String name = field(req, "brokerName");
        String addr = field(req, "brokerAddr");
        long id = brokerId(req);
        String group;
        synchronized (NameServer.class) {
            live.remove(addr);
            TreeMap<Long, String> addrs = groups.get(name);
            if (addrs != null) {
                if (addr.equals(addrs.get(id))) addrs.remove(id);
                if (addrs.isEmpty()) {
                    groups.remove(name);
                    TreeSet<String> names = clusters.get(cluster);
                    if (names != null) names.remove(name);
                }
            }
            group = addrs == null ? "{}" : addrs.toString();
        }
        resp.code = 0;
        out.println("unregister " + cluster + " " + name + " " + id + " " + addr + " group " + group);
    }
}
