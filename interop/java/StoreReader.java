// StoreReader opens a RocketMQ 4.9 store directory the way a 4.9 broker's
// message store opens it at start, and reports what that broker would
// recover. It is written from the rules (rocketmq-ha-spec.md section 2 and
// the 4.9.7 store's loading and recovery rules as interop/README.md states
// them), not from RocketMQ's or replicator's code, as an independent check
// that a broker can take over a directory replicator wrote. It only reads:
// nothing in ROOT changes.
//
//   java StoreReader ROOT SEGMENT_SIZE
//
// What it does, in the broker's order:
//  1. abort: present means the last shutdown was abnormal.
//  2. commitlog/: every entry, in name order, must be a regular file of
//     exactly SEGMENT_SIZE bytes named by a decimal number (the broker
//     refuses to start otherwise: "error load ..."). Starts that do not
//     follow each other by SEGMENT_SIZE are logged by the broker as a bug
//     ("warn gap ...").
//  3. checkpoint: absent, the broker creates a page of zeros; present, the
//     first three big-endian int64 are the physical, logical and index
//     timestamps.
//  4. Recovery. Normal (no abort): scan from the third-last segment. Abnormal:
//     from the last segment, going back, whose first record is a message
//     with a non-zero store timestamp at most min(physical, logical) - 3 s
//     (0 when that is negative), else from the first segment. The scan
//     checks each record (lengths, magic code, body CRC); a message moves
//     on, the blank magic moves to the next segment (and ends the scan after
//     the last), anything else ends it. Where it ends is the recovered max
//     offset; later segments are deleted ("drop NAME").
//  5. Dispatch (the broker's reput, which rebuilds the consume queues a
//     store without consumequeue/ lacks): from the first segment's start to
//     the max offset with the same record check but no CRC. Each message is
//     reported; per topic and queue the queue offsets must follow each
//     other ("error queue ..." otherwise: the consume queue would be wrong).
//  6. config/: topics.json, subscriptionGroup.json, consumerOffset.json,
//     delayOffset.json as the broker's config managers load them: the file,
//     else (missing, empty or unreadable) NAME.bak, else nothing. A document
//     that is present but unreadable in both is an error: the broker starts
//     without it.
//
// Standard output, one event per line: "exit normal|abnormal",
// "segment NAME", "checkpoint absent" or "checkpoint PHYS LOGICS INDEX",
// "recover normal|abnormal FIRST_SEGMENT", "filler OFFSET" (the scan ended
// on the last segment's filler), "recovered MAX", "drop NAME",
// "message OFFSET SIZE QUEUE QUEUEOFFSET BODYCRC STORETIMESTAMP SHA256 TOPIC",
// "queue TOPIC QUEUE FIRST NEXT", "config NAME absent|ok|bak ENTRIES",
// "done MESSAGES", and "error ..." / "warn ..." lines. Exit status 2 when
// the broker would refuse to load the store, 1 after any error line, else 0.

import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.CRC32;

public final class StoreReader {
    static final int MAGIC = 0xDAA320A7;       // message format v1, the only one 4.9 reads
    static final int BLANK_MAGIC = 0xCBD43194; // end-of-segment filler
    static final int BORN_V6 = 1 << 4;         // sysFlag: born host is IPv6
    static final int STORE_V6 = 1 << 5;        // sysFlag: store host is IPv6
    static final long CHECKPOINT_SLACK_MS = 3000;

    static final PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    static int errors;

    /** One segment file of the commit log. */
    static final class Segment {
        final String name;
        final long start;
        final ByteBuffer data; // the whole file, read-only

        Segment(String name, long start, ByteBuffer data) {
            this.name = name;
            this.start = start;
            this.data = data;
        }
    }

    /**
     * What checking one record at a buffer's position gives, as the broker
     * sees it: size > 0 and ok (a message), size 0 and ok (the blank magic:
     * the segment ends), size > 0 and not ok (lengths that do not add up to
     * the total: the broker's reput skips it), size -1 (anything else).
     */
    static final class Record {
        int size = -1;
        boolean ok;
        String topic;
        int queue;
        long queueOffset;
        int bodyCrc;
        long storeTimestamp;
        byte[] body;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: StoreReader ROOT SEGMENT_SIZE");
            System.exit(64);
        }
        File root = new File(args[0]);
        long segSize = Long.parseLong(args[1]);

        boolean abnormal = new File(root, "abort").exists();
        out.println("exit " + (abnormal ? "abnormal" : "normal"));

        List<Segment> segs = load(new File(root, "commitlog"), segSize);
        if (segs == null) {
            System.exit(2);
        }

        long[] ckpt = checkpoint(new File(root, "checkpoint"));

        long max = recover(segs, segSize, abnormal, ckpt);
        out.println("recovered " + max);
        for (Segment s : segs) {
            if (s.start > max) {
                out.println("drop " + s.name);
            }
        }

        int messages = dispatch(segs, segSize, max);

        File config = new File(root, "config");
        for (String name : new String[] {"topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json"}) {
            config(config, name);
        }
        out.println("done " + messages);
        System.exit(errors > 0 ? 1 : 0);
    }

    static void error(String what) {
        errors++;
        out.println("error " + what);
    }

    /** Loads commitlog/ with the broker's file rules; null when it would refuse. */
    static List<Segment> load(File dir, long segSize) throws IOException {
        List<Segment> segs = new ArrayList<>();
        File[] files = dir.listFiles();
        if (files == null) {
            return segs; // no commit log yet: an empty store
        }
        Arrays.sort(files, (a, b) -> a.getName().compareTo(b.getName()));
        Segment prev = null;
        for (File f : files) {
            if (!f.isFile() || f.length() != segSize) {
                out.println("error load " + f.getName() + ": " + (f.isFile() ? f.length() + " bytes, not " + segSize : "not a regular file"));
                return null;
            }
            long start;
            try {
                start = Long.parseLong(f.getName());
            } catch (NumberFormatException e) {
                out.println("error load " + f.getName() + ": the name is not an offset");
                return null;
            }
            ByteBuffer data;
            try (RandomAccessFile raf = new RandomAccessFile(f, "r"); FileChannel ch = raf.getChannel()) {
                MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_ONLY, 0, segSize);
                data = m;
            }
            Segment s = new Segment(f.getName(), start, data);
            if (prev != null && s.start - prev.start != segSize) {
                out.println("warn gap " + prev.name + " " + s.name);
            }
            out.println("segment " + s.name);
            segs.add(s);
            prev = s;
        }
        return segs;
    }

    /** The checkpoint's three timestamps, or zeros (the broker creates a zero page). */
    static long[] checkpoint(File f) throws IOException {
        long[] ts = new long[3];
        if (!f.exists()) {
            out.println("checkpoint absent");
            return ts;
        }
        // The broker maps a whole page: bytes past the file's end read as zeros.
        byte[] page = new byte[24];
        try (RandomAccessFile raf = new RandomAccessFile(f, "r")) {
            raf.read(page);
        }
        ByteBuffer b = ByteBuffer.wrap(page);
        for (int i = 0; i < 3; i++) {
            ts[i] = b.getLong();
        }
        out.println("checkpoint " + ts[0] + " " + ts[1] + " " + ts[2]);
        return ts;
    }

    /** Recovery: returns the recovered max offset. */
    static long recover(List<Segment> segs, long segSize, boolean abnormal, long[] ckpt) {
        if (segs.isEmpty()) {
            out.println("recover " + (abnormal ? "abnormal" : "normal") + " none");
            return 0;
        }
        int i;
        if (!abnormal) {
            i = Math.max(0, segs.size() - 3);
        } else {
            long limit = Math.max(0, Math.min(ckpt[0], ckpt[1]) - CHECKPOINT_SLACK_MS);
            for (i = segs.size() - 1; i >= 0; i--) {
                if (startsBefore(segs.get(i), limit)) {
                    break;
                }
            }
            if (i < 0) {
                i = 0;
            }
        }
        out.println("recover " + (abnormal ? "abnormal" : "normal") + " " + segs.get(i).name);
        while (true) {
            Segment s = segs.get(i);
            ByteBuffer b = s.data.duplicate();
            int pos = 0;
            while (true) {
                b.position(pos);
                Record r = check(b, true, true);
                if (!r.ok) {
                    return s.start + pos;
                }
                if (r.size == 0) { // blank magic: the segment is done
                    break;
                }
                pos += r.size;
            }
            if (++i >= segs.size()) {
                // The last segment ends in a filler: the broker's max is the
                // filler's position, not the segment's end (it appends
                // over the filler).
                out.println("filler " + (s.start + pos));
                return s.start + pos;
            }
        }
    }

    /** Abnormal recovery's test of a segment's first record against the checkpoint. */
    static boolean startsBefore(Segment s, long limit) {
        ByteBuffer b = s.data.duplicate();
        if (b.getInt(4) != MAGIC) {
            return false;
        }
        int sysFlag = b.getInt(36);
        int at = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + ((sysFlag & BORN_V6) == 0 ? 8 : 20);
        long ts = b.getLong(at);
        return ts != 0 && ts <= limit;
    }

    /** Dispatch: reports the messages of [first start, max). */
    static int dispatch(List<Segment> segs, long segSize, long max) throws NoSuchAlgorithmException {
        Map<String, long[]> queues = new TreeMap<>(); // topic + ' ' + queue -> {first, next}
        int n = 0;
        for (Segment s : segs) {
            if (s.start >= max) {
                break;
            }
            int limit = (int) Math.min(segSize, max - s.start);
            ByteBuffer b = s.data.duplicate();
            int pos = 0;
            while (pos < limit) {
                b.position(pos);
                b.limit(limit);
                Record r = check(b, false, true);
                b.limit(b.capacity());
                if (r.ok && r.size == 0) {
                    break;
                }
                if (!r.ok && r.size > 0) {
                    error("dispatch skips " + r.size + " bytes at " + (s.start + pos) + ": lengths do not add up");
                    pos += r.size;
                    continue;
                }
                if (!r.ok) {
                    error("dispatch stops at " + (s.start + pos) + ", below the max offset " + max);
                    return n;
                }
                n++;
                out.println("message " + (s.start + pos) + " " + r.size + " " + r.queue + " " + r.queueOffset + " "
                    + Integer.toUnsignedString(r.bodyCrc) + " " + r.storeTimestamp + " " + sha256(r.body) + " " + r.topic);
                String key = r.topic + " " + r.queue;
                long[] q = queues.get(key);
                if (q == null) {
                    queues.put(key, new long[] {r.queueOffset, r.queueOffset + 1});
                } else if (r.queueOffset != q[1]) {
                    error("queue " + key + ": offset " + r.queueOffset + " at " + (s.start + pos) + ", want " + q[1]);
                    q[1] = r.queueOffset + 1;
                } else {
                    q[1]++;
                }
                pos += r.size;
            }
        }
        for (Map.Entry<String, long[]> e : queues.entrySet()) {
            out.println("queue " + e.getKey() + " " + e.getValue()[0] + " " + e.getValue()[1]);
        }
        return n;
    }

    /** Checks the record at b's position and reads its fields. */
    static Record check(ByteBuffer b, boolean checkCrc, boolean readBody) {
        Record r = new Record();
        try {
            int total = b.getInt();
            int magic = b.getInt();
            if (magic == BLANK_MAGIC) {
                r.size = 0;
                r.ok = true;
                return r;
            }
            if (magic != MAGIC || total < 0) {
                return r;
            }
            r.bodyCrc = b.getInt();
            r.queue = b.getInt();
            b.getInt(); // flag
            r.queueOffset = b.getLong();
            b.getLong(); // physical offset: the broker does not check it
            int sysFlag = b.getInt();
            b.getLong(); // born timestamp
            skip(b, (sysFlag & BORN_V6) == 0 ? 8 : 20);
            r.storeTimestamp = b.getLong();
            skip(b, (sysFlag & STORE_V6) == 0 ? 8 : 20);
            b.getInt(); // reconsume times
            b.getLong(); // prepared transaction offset
            int bodyLen = b.getInt();
            if (bodyLen > 0) {
                if (readBody) {
                    if (bodyLen > total) {
                        return r;
                    }
                    r.body = new byte[bodyLen];
                    b.get(r.body);
                    if (checkCrc && crc(r.body) != r.bodyCrc) {
                        return r;
                    }
                } else {
                    skip(b, bodyLen);
                }
            } else {
                r.body = new byte[0];
            }
            int topicLen = b.get(); // a signed byte, as the broker reads it
            if (topicLen < 0 || topicLen > total) {
                return r;
            }
            byte[] topic = new byte[topicLen];
            b.get(topic);
            r.topic = new String(topic, StandardCharsets.UTF_8);
            short propsLen = b.getShort();
            if (propsLen > 0) {
                if (propsLen > total) {
                    return r;
                }
                skip(b, propsLen);
            }
            int bornHost = (sysFlag & BORN_V6) == 0 ? 8 : 20;
            int storeHost = (sysFlag & STORE_V6) == 0 ? 8 : 20;
            int want = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + bornHost + 8 + storeHost + 4 + 8
                + 4 + Math.max(bodyLen, 0) + 1 + topicLen + 2 + Math.max(propsLen, 0);
            r.size = total;
            r.ok = total == want;
            return r;
        } catch (BufferUnderflowException | IllegalArgumentException e) {
            return new Record();
        }
    }

    static void skip(ByteBuffer b, int n) {
        b.position(b.position() + n); // IllegalArgumentException past the limit
    }

    /** The body CRC as RocketMQ stores it: CRC-32 with the top bit cleared. */
    static int crc(byte[] body) {
        CRC32 c = new CRC32();
        c.update(body, 0, body.length);
        return (int) (c.getValue() & 0x7FFFFFFFL);
    }

    static String sha256(byte[] b) throws NoSuchAlgorithmException {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(b == null ? new byte[0] : b);
        StringBuilder s = new StringBuilder();
        for (byte x : d) {
            s.append(String.format("%02x", x & 0xFF));
        }
        return s.toString();
    }

    /** Loads config/NAME as a broker's config manager does. */
    static void config(File dir, String name) {
        File main = new File(dir, name);
        File bak = new File(dir, name + ".bak");
        String mainErr = null;
        if (main.exists()) {
            try {
                int entries = decode(name, Files.readString(main.toPath(), StandardCharsets.UTF_8));
                if (entries >= 0) {
                    out.println("config " + name + " ok " + entries);
                    return;
                }
            } catch (IOException e) {
                mainErr = e.getMessage();
            }
        }
        if (bak.exists()) {
            try {
                int entries = decode(name, Files.readString(bak.toPath(), StandardCharsets.UTF_8));
                if (entries >= 0) {
                    out.println("config " + name + " bak " + entries);
                    return;
                }
            } catch (IOException e) {
                error("config " + name + ": " + mainErr + "; " + name + ".bak: " + e.getMessage());
                return;
            }
        }
        if (mainErr != null) {
            error("config " + name + ": " + mainErr + " (no " + name + ".bak: the broker starts without it)");
            return;
        }
        out.println("config " + name + " absent");
    }

    /**
     * Decodes a config document as its wrapper class: -1 when empty (the
     * broker then reads the .bak), else the entries of its table.
     */
    static int decode(String name, String json) throws IOException {
        if (json.isEmpty()) {
            return -1;
        }
        Object v = new RemotingMaster.Codec.Json(json).parseAll();
        if (!(v instanceof Map)) {
            throw new IOException("not a JSON object");
        }
        Map<?, ?> doc = (Map<?, ?>) v;
        Object dv = doc.get("dataVersion");
        if (dv != null) {
            if (!(dv instanceof Map)) {
                throw new IOException("dataVersion is not an object");
            }
            for (String f : new String[] {"stateVersion", "timestamp", "counter"}) {
                Object x = ((Map<?, ?>) dv).get(f);
                if (x != null && !(x instanceof Long)) {
                    throw new IOException("dataVersion." + f + " is not an integer");
                }
            }
        }
        String table;
        switch (name) {
            case "topics.json": table = "topicConfigTable"; break;
            case "subscriptionGroup.json": table = "subscriptionGroupTable"; break;
            default: table = "offsetTable";
        }
        Object t = doc.get(table);
        if (t == null) {
            return 0;
        }
        if (!(t instanceof Map)) {
            throw new IOException(table + " is not an object");
        }
        for (Map.Entry<?, ?> e : ((Map<?, ?>) t).entrySet()) {
            Object val = e.getValue();
            if (name.equals("delayOffset.json")) {
                checkInt(e.getKey(), "delay level");
                if (!(val instanceof Long)) {
                    throw new IOException("offsetTable." + e.getKey() + " is not an integer");
                }
                continue;
            }
            if (!(val instanceof Map)) {
                throw new IOException(table + "." + e.getKey() + " is not an object");
            }
            if (name.equals("consumerOffset.json")) {
                for (Map.Entry<?, ?> q : ((Map<?, ?>) val).entrySet()) {
                    checkInt(q.getKey(), "queue id");
                    if (!(q.getValue() instanceof Long)) {
                        throw new IOException("offsetTable." + e.getKey() + "." + q.getKey() + " is not an integer");
                    }
                }
            }
        }
        return ((Map<?, ?>) t).size();
    }

    static void checkInt(Object key, String what) throws IOException {
        try {
            Integer.parseInt(String.valueOf(key));
        } catch (NumberFormatException e) {
            throw new IOException(what + " " + key + " is not an integer");
        }
    }
}
