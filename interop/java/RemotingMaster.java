// RemotingMaster is a minimal RocketMQ broker as a slave's SlaveSynchronize
// sees it over the remoting protocol, written from replicator's protocol
// description (rocketmq-ha-spec.md section 8, docs/protocol.md "RocketMQ
// remoting (metadata)"), not from RocketMQ's code, as an independent second
// implementation for the interop tests. Its nested class Codec (the frame,
// both header serialisations, a lenient JSON reader) is shared with
// RemotingSlave.
//
//   java RemotingMaster PORT [--v4]
//
// It answers, in the serialisation of each request:
//   GET_ALL_TOPIC_CONFIG (21)              {"dataVersion":{...},"topicConfigTable":{...}}
//   GET_ALL_CONSUMER_OFFSET (43)           {"offsetTable":{"topic@group":{0:12,1:7}}}   (no dataVersion, 4.x)
//   GET_ALL_DELAY_OFFSET (45)              {"offsetTable":{1:0,2:17}}
//   GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) {"dataVersion":{...},"forbiddenTable":{},"subscriptionGroupTable":{...}}
//   GET_ALL_MESSAGE_REQUEST_MODE (402)     {"messageRequestModeMap":{...}}; with --v4 REQUEST_CODE_NOT_SUPPORTED
//   GET_TIMER_METRICS (61)                 {"dataVersion":{...},"timingCount":{...}}; with --v4 REQUEST_CODE_NOT_SUPPORTED
// as fastjson writes them: members in alphabetical order, integer map keys
// without quotes. Any other code gets REQUEST_CODE_NOT_SUPPORTED (3) with the
// remark " request type CODE not supported". A malformed frame closes the
// connection.
//
// Commands on standard input, one per line:
//   topic NAME                  add a topic; the topics' DataVersion moves on (counter + 1)
//   offset TOPIC@GROUP Q OFF    set a consumer offset (no DataVersion change, as RocketMQ)
//   quit                        exit
//
// Standard output, one event per line: "listening PORT", "request CODE
// SERIALIZE OPAQUE", "topics COUNTER", "offsets", "closed REASON".

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public final class RemotingMaster {
    static final PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    // The broker's metadata, guarded by the class lock.
    static final TreeMap<String, Long> topics = new TreeMap<>();
    static final TreeMap<String, TreeMap<Integer, Long>> offsets = new TreeMap<>();
    static long topicCounter = 1;
    static final long topicTimestamp = 1764576000000L;
    static boolean v4;

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: RemotingMaster PORT [--v4]");
            System.exit(2);
        }
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("--v4")) {
                v4 = true;
            } else {
                throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        synchronized (RemotingMaster.class) {
            topics.put("TopicTest", 8L);
            TreeMap<Integer, Long> q = new TreeMap<>();
            q.put(0, 12L);
            q.put(1, 7L);
            offsets.put("TopicTest@GroupA", q);
        }
        ServerSocket ss = new ServerSocket();
        ss.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), Integer.parseInt(args[0])));
        out.println("listening " + ss.getLocalPort());
        Thread acceptor = new Thread(() -> {
            while (true) {
                try {
                    Socket s = ss.accept();
                    s.setTcpNoDelay(true);
                    Thread t = new Thread(() -> serve(s));
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return;
                }
            }
        });
        acceptor.setDaemon(true);
        acceptor.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split("\\s+");
            switch (f[0]) {
                case "topic":
                    synchronized (RemotingMaster.class) {
                        topics.put(f[1], 4L);
                        topicCounter++;
                        out.println("topics " + topicCounter);
                    }
                    break;
                case "offset":
                    synchronized (RemotingMaster.class) {
                        offsets.computeIfAbsent(f[1], k -> new TreeMap<>()).put(Integer.parseInt(f[2]), Long.parseLong(f[3]));
                        out.println("offsets");
                    }
                    break;
                case "quit":
                    ss.close();
                    System.exit(0);
                    break;
                default:
                    out.println("error unknown command " + line);
            }
        }
        ss.close();
    }

    static void serve(Socket s) {
        try (Socket sock = s) {
            DataInputStream in = new DataInputStream(sock.getInputStream());
            OutputStream os = sock.getOutputStream();
            while (true) {
                Codec.Command req;
                try {
                    req = Codec.read(in, 16 << 20);
                } catch (EOFException e) {
                    out.println("closed eof");
                    return;
                }
                out.println("request " + req.code + " " + (req.serialize == 0 ? "JSON" : "ROCKETMQ") + " " + req.opaque);
                Codec.Command resp = new Codec.Command();
                resp.opaque = req.opaque;
                resp.flag = 1;
                resp.serialize = req.serialize;
                resp.version = req.version;
                String body = answer(req.code);
                if (body == null) {
                    resp.code = 3;
                    resp.remark = " request type " + req.code + " not supported";
                } else {
                    resp.body = body.getBytes(StandardCharsets.UTF_8);
                }
                if ((req.flag & 2) == 0) {
                    os.write(Codec.encode(resp));
                    os.flush();
                }
            }
        } catch (IOException | RuntimeException e) {
            out.println("closed " + e.getClass().getSimpleName() + ": " + e.getMessage());
        }
    }

    static String dataVersion(long counter, long timestamp) {
        return "{\"counter\":" + counter + ",\"stateVersion\":0,\"timestamp\":" + timestamp + "}";
    }

    static synchronized String answer(int code) {
        StringBuilder b = new StringBuilder();
        switch (code) {
            case 21: {
                b.append("{\"dataVersion\":").append(dataVersion(topicCounter, topicTimestamp + topicCounter)).append(",\"topicConfigTable\":{");
                boolean first = true;
                for (Map.Entry<String, Long> e : topics.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    String n = Codec.quote(e.getKey());
                    b.append(n).append(":{\"order\":false,\"perm\":6,\"readQueueNums\":").append(e.getValue())
                        .append(",\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":").append(n)
                        .append(",\"topicSysFlag\":0,\"writeQueueNums\":").append(e.getValue()).append('}');
                }
                return b.append("}}").toString();
            }
            case 43: {
                b.append("{\"offsetTable\":{");
                boolean first = true;
                for (Map.Entry<String, TreeMap<Integer, Long>> e : offsets.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    b.append(Codec.quote(e.getKey())).append(":{");
                    boolean firstQ = true;
                    for (Map.Entry<Integer, Long> q : e.getValue().entrySet()) {
                        if (!firstQ) b.append(',');
                        firstQ = false;
                        b.append(q.getKey()).append(':').append(q.getValue()); // fastjson: no quotes
                    }
                    b.append('}');
                }
                return b.append("}}").toString();
            }
            case 45:
                return "{\"offsetTable\":{1:0,2:17,3:5}}";
            case 201:
                return "{\"dataVersion\":" + dataVersion(3, topicTimestamp) + ",\"forbiddenTable\":{},\"subscriptionGroupTable\":{"
                    + "\"GroupA\":{\"brokerId\":0,\"consumeBroadcastEnable\":true,\"consumeEnable\":true,\"consumeFromMinEnable\":true,"
                    + "\"groupName\":\"GroupA\",\"notifyConsumerIdsChangedEnable\":true,\"retryMaxTimes\":16,\"retryQueueNums\":1,"
                    + "\"whichBrokerWhenConsumeSlowly\":1}}}";
            case 61:
                if (v4) return null;
                return "{\"dataVersion\":" + dataVersion(5, topicTimestamp) + ",\"timingCount\":{\"TopicTest\":{\"count\":3,\"timeStamp\":" + topicTimestamp + "}}}";
            case 402:
                if (v4) return null;
                return "{\"messageRequestModeMap\":{\"TopicTest\":{\"GroupA\":{\"consumerGroup\":\"GroupA\",\"mode\":\"POP\",\"popShareQueueNum\":0,\"topic\":\"TopicTest\"}}}}";
            default:
                return null;
        }
    }

    /** The remoting frame and both header serialisations, and a lenient JSON reader. */
    public static final class Codec {
        private Codec() {}

        /** One RemotingCommand. */
        public static final class Command {
            public int code;
            public int language; // LanguageCode: JAVA 0
            public int version;
            public int opaque;
            public int flag;
            public String remark;
            public Map<String, String> extFields = new TreeMap<>();
            public byte[] body = new byte[0];
            public int serialize; // 0 JSON, 1 ROCKETMQ
        }

        static final String[] LANGUAGES = {"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS"};

        /** [length i32][serialize u8 | header length u24][header][body]; length counts what follows it. */
        public static byte[] encode(Command c) {
            byte[] header = c.serialize == 0 ? jsonHeader(c) : binaryHeader(c);
            ByteBuffer b = ByteBuffer.allocate(8 + header.length + c.body.length);
            b.putInt(4 + header.length + c.body.length);
            b.putInt((c.serialize << 24) | header.length);
            b.put(header);
            b.put(c.body);
            return b.array();
        }

        static byte[] jsonHeader(Command c) {
            StringBuilder b = new StringBuilder("{\"code\":").append(c.code);
            if (!c.extFields.isEmpty()) {
                b.append(",\"extFields\":{");
                boolean first = true;
                for (Map.Entry<String, String> e : c.extFields.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    b.append(quote(e.getKey())).append(':').append(quote(e.getValue()));
                }
                b.append('}');
            }
            b.append(",\"flag\":").append(c.flag).append(",\"language\":\"").append(LANGUAGES[c.language]).append('"');
            b.append(",\"opaque\":").append(c.opaque);
            if (c.remark != null) b.append(",\"remark\":").append(quote(c.remark));
            b.append(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":").append(c.version).append('}');
            return b.toString().getBytes(StandardCharsets.UTF_8);
        }

        static byte[] binaryHeader(Command c) {
            ByteArrayOutputStream ext = new ByteArrayOutputStream();
            for (Map.Entry<String, String> e : c.extFields.entrySet()) {
                byte[] k = e.getKey().getBytes(StandardCharsets.UTF_8);
                byte[] v = e.getValue().getBytes(StandardCharsets.UTF_8);
                ByteBuffer kv = ByteBuffer.allocate(2 + k.length + 4 + v.length);
                kv.putShort((short) k.length).put(k).putInt(v.length).put(v);
                ext.writeBytes(kv.array());
            }
            byte[] remark = c.remark == null ? new byte[0] : c.remark.getBytes(StandardCharsets.UTF_8);
            ByteBuffer b = ByteBuffer.allocate(2 + 1 + 2 + 4 + 4 + 4 + remark.length + 4 + ext.size());
            b.putShort((short) c.code).put((byte) c.language).putShort((short) c.version).putInt(c.opaque).putInt(c.flag);
            b.putInt(remark.length).put(remark);
            b.putInt(ext.size()).put(ext.toByteArray());
            return b.array();
        }

        /** Reads one frame; every length is checked before anything is allocated for it. */
        public static Command read(DataInputStream in, int maxFrame) throws IOException {
            int length = in.readInt();
            if (length < 4 || (long) length + 4 > maxFrame) throw new IOException("bad frame length " + length);
            int info = in.readInt();
            int serialize = (info >>> 24) & 0xFF;
            int headerLen = info & 0xFFFFFF;
            if (headerLen > length - 4) throw new IOException("header length " + headerLen + " over frame " + length);
            byte[] header = new byte[headerLen];
            in.readFully(header);
            byte[] body = new byte[length - 4 - headerLen];
            in.readFully(body);
            Command c;
            if (serialize == 0) {
                c = fromJSON(header);
            } else if (serialize == 1) {
                c = fromBinary(header);
            } else {
                throw new IOException("unknown serialize type " + serialize);
            }
            c.serialize = serialize;
            c.body = body;
            return c;
        }

        static Command fromJSON(byte[] header) throws IOException {
            Object o = new Json(new String(header, StandardCharsets.UTF_8)).parseAll();
            if (!(o instanceof Map)) throw new IOException("JSON header is not an object");
            Map<?, ?> m = (Map<?, ?>) o;
            Command c = new Command();
            if (!(m.get("code") instanceof Long)) throw new IOException("JSON header without a numeric code");
            c.code = ((Long) m.get("code")).intValue();
            c.opaque = m.get("opaque") instanceof Long ? ((Long) m.get("opaque")).intValue() : 0;
            c.flag = m.get("flag") instanceof Long ? ((Long) m.get("flag")).intValue() : 0;
            c.version = m.get("version") instanceof Long ? ((Long) m.get("version")).intValue() : 0;
            Object lang = m.get("language");
            c.language = -1;
            for (int i = 0; i < LANGUAGES.length; i++) {
                if (LANGUAGES[i].equals(lang)) c.language = i;
            }
            if (lang != null && c.language < 0) throw new IOException("unknown language " + lang);
            if (c.language < 0) c.language = 0;
            if (m.get("remark") instanceof String) c.remark = (String) m.get("remark");
            if (m.get("extFields") instanceof Map) {
                for (Map.Entry<?, ?> e : ((Map<?, ?>) m.get("extFields")).entrySet()) {
                    c.extFields.put(String.valueOf(e.getKey()), String.valueOf(e.getValue()));
                }
            }
            return c;
        }

        static Command fromBinary(byte[] header) throws IOException {
            ByteBuffer b = ByteBuffer.wrap(header);
            if (b.remaining() < 21) throw new IOException("ROCKETMQ header of " + header.length + " bytes");
            Command c = new Command();
            c.code = b.getShort();
            c.language = b.get() & 0xFF;
            c.version = b.getShort();
            c.opaque = b.getInt();
            c.flag = b.getInt();
            int rlen = b.getInt();
            if (rlen < 0 || rlen > b.remaining()) throw new IOException("remark length " + rlen);
            if (rlen > 0) {
                byte[] r = new byte[rlen];
                b.get(r);
                c.remark = new String(r, StandardCharsets.UTF_8);
            }
            if (b.remaining() < 4) throw new IOException("no extFields length");
            int elen = b.getInt();
            if (elen != b.remaining()) throw new IOException("extFields length " + elen + ", " + b.remaining() + " bytes left");
            while (b.hasRemaining()) {
                if (b.remaining() < 2) throw new IOException("cut extFields key length");
                int klen = b.getShort();
                if (klen < 0 || klen > b.remaining()) throw new IOException("key length " + klen);
                byte[] k = new byte[klen];
                b.get(k);
                if (b.remaining() < 4) throw new IOException("cut extFields value length");
                int vlen = b.getInt();
                if (vlen < 0 || vlen > b.remaining()) throw new IOException("value length " + vlen);
                byte[] v = new byte[vlen];
                b.get(v);
                c.extFields.put(new String(k, StandardCharsets.UTF_8), new String(v, StandardCharsets.UTF_8));
            }
            return c;
        }

        public static String quote(String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char ch : s.toCharArray()) {
                switch (ch) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    default:
                        if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
                        else b.append(ch);
                }
            }
            return b.append('"').toString();
        }

        /** Reads one complete frame from a socket's stream. */
        public static Command read(InputStream in, int maxFrame) throws IOException {
            return read(new DataInputStream(in), maxFrame);
        }

        /**
         * A JSON reader as lenient as fastjson in the one way RocketMQ needs: an
         * object key may be a bare token (fastjson writes integer keys unquoted).
         * Objects are LinkedHashMap (keys as strings), arrays ArrayList, integers
         * Long, other numbers Double.
         */
        public static final class Json {
            private final String s;
            private int i;

            public Json(String s) {
                this.s = s;
            }

            public Object parseAll() throws IOException {
                Object v = value();
                ws();
                if (i != s.length()) throw err("trailing data");
                return v;
            }

            private IOException err(String what) {
                return new IOException("JSON: " + what + " at " + i);
            }

            private void ws() {
                while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
            }

            private Object value() throws IOException {
                ws();
                if (i >= s.length()) throw err("end of input");
                char c = s.charAt(i);
                if (c == '{') return object();
                if (c == '[') return array();
                if (c == '"') return string();
                if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
                if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
                if (s.startsWith("null", i)) { i += 4; return null; }
                return number();
            }

            private Map<String, Object> object() throws IOException {
                Map<String, Object> m = new LinkedHashMap<>();
                i++;
                ws();
                if (i < s.length() && s.charAt(i) == '}') { i++; return m; }
                while (true) {
                    ws();
                    String key;
                    if (i < s.length() && s.charAt(i) == '"') {
                        key = string();
                    } else {
                        int start = i;
                        while (i < s.length() && (Character.isLetterOrDigit(s.charAt(i)) || s.charAt(i) == '-' || s.charAt(i) == '_')) i++;
                        if (start == i) throw err("object key");
                        key = s.substring(start, i);
                    }
                    ws();
                    if (i >= s.length() || s.charAt(i) != ':') throw err("':'");
                    i++;
                    m.put(key, value());
                    ws();
                    if (i >= s.length()) throw err("end of object");
                    char c = s.charAt(i++);
                    if (c == '}') return m;
                    if (c != ',') throw err("',' or '}'");
                }
            }

            private List<Object> array() throws IOException {
                List<Object> a = new ArrayList<>();
                i++;
                ws();
                if (i < s.length() && s.charAt(i) == ']') { i++; return a; }
                while (true) {
                    a.add(value());
                    ws();
                    if (i >= s.length()) throw err("end of array");
                    char c = s.charAt(i++);
                    if (c == ']') return a;
                    if (c != ',') throw err("',' or ']'");
                }
            }

            private String string() throws IOException {
                StringBuilder b = new StringBuilder();
                i++;
                while (true) {
                    if (i >= s.length()) throw err("end of string");
                    char c = s.charAt(i++);
                    if (c == '"') return b.toString();
                    if (c != '\\') { b.append(c); continue; }
                    if (i >= s.length()) throw err("end of escape");
                    char e = s.charAt(i++);
                    switch (e) {
                        case 'n': b.append('\n'); break;
                        case 't': b.append('\t'); break;
                        case 'r': b.append('\r'); break;
                        case 'b': b.append('\b'); break;
                        case 'f': b.append('\f'); break;
                        case 'u':
                            if (i + 4 > s.length()) throw err("\\u escape");
                            b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                            i += 4;
                            break;
                        default: b.append(e);
                    }
                }
            }

            private Object number() throws IOException {
                int start = i;
                while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
                String n = s.substring(start, i);
                if (n.isEmpty()) throw err("value");
                try {
                    if (n.indexOf('.') < 0 && n.indexOf('e') < 0 && n.indexOf('E') < 0) return Long.parseLong(n);
                    return Double.parseDouble(n);
                } catch (NumberFormatException ex) {
                    throw err("number " + n);
                }
            }
        }
    }
}
