// AutoSwitchSlave is a minimal slave of RocketMQ 5's controller-mode
// ("AutoSwitch") HA protocol, written from replicator's protocol description
// (shared/docs/rocketmq-ha-spec.md section 10, transport/doc.go), not from
// RocketMQ's code, as an independent second implementation for the interop
// tests.
//
//   java AutoSwitchSlave HOST:PORT DIR SEGMENT_SIZE [--broker-id N] [--sync-from-last-file]
//        [--async-learner] [--epochs E:START[,...]] [--report-ms N] [--idle-ms N] [--split SEED]
//
// It keeps the replicated commit log in DIR as segment files named by their
// start offset (20 digits); each file holds only the bytes received so far,
// so the log's max offset is the last file's start plus its length. Its epoch
// list is DIR/epochFileCheckpoint in RocketMQ's text format (a count line, a
// line with the CRC-32 of the entry lines masked to 31 bits, one
// "EPOCH-START" line per entry, each line ending in "\n"); --epochs replaces
// it before connecting. An empty list removes the file.
//
// Session (all integers big-endian; state = HAConnectionState ordinal):
//   1. connect, send [1][syncFromLastFile i16][asyncLearner i16][brokerId i64];
//   2. read the master handshake [1][12N][maxOffset i64][lastEpoch i32] + N x
//      [epoch i32][start i64]. With an empty local epoch list nothing is cut
//      and the reported offset is 0. Otherwise both lists get an end for their
//      last entry (master: its max offset; local: the local max offset) and the
//      consistent point is found: walking the local entries from the highest
//      epoch down, the first whose epoch the master has with the same start
//      gives min(local end, master end). None: "error no consistent point",
//      exit 3. Else the log and the epoch list are cut there (entries starting
//      at or after it are dropped) and the reported offset is that point;
//   3. transfer: frames [2][size i32][offset i64][epoch i32][epochStart i64]
//      [confirm i64][body]. A frame whose epoch differs from the last one seen
//      appends {epoch, epochStart} to the epoch list when it is newer (higher
//      epoch, higher start). The body is appended; the local confirm offset is
//      min(confirm, local max). After each read that grew the log past the
//      reported offset, and every --report-ms, it sends [2][reported offset]
//      (so a new or just truncated slave sends its first ack on the timer, as
//      RocketMQ does).
//
// Checks, each fatal (a line "error ..." and exit status 2): a state other
// than the one expected; a handshake bodySize not a multiple of 12 or above
// 1000 entries; a size outside [0, 4 MiB - 36]; a negative offset; a frame
// offset other than the local max offset once the log is not empty
// (heartbeats included); a first frame on an empty log that does not start a
// segment; a body that crosses a segment end; a frame of an epoch listed in
// the master's handshake that does not lie within that epoch's range, or whose
// epochStart differs from the listed start. --split reads the socket in random
// small pieces, so frames arrive split at any byte.
//
// Standard output, one event per line: "connected MAX NEPOCHS",
// "master-handshake MAX LASTEPOCH N", "master-epoch EPOCH START",
// "truncate FROM TO", "keep MAX" (nothing cut), "epoch EPOCH START" (appended),
// "report V", "frame OFFSET SIZE EPOCH CONFIRM", "heartbeat OFFSET EPOCH CONFIRM",
// "eof", "error MESSAGE".

import java.io.DataOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.zip.CRC32;

public final class AutoSwitchSlave {
    static final int HANDSHAKE = 1;
    static final int TRANSFER = 2;
    static final int BUFFER = 4 << 20;
    static final int TRANSFER_HEADER = 36;
    static final int HANDSHAKE_HEADER = 20;
    static final int MAX_BODY = BUFFER - TRANSFER_HEADER;
    static final int MAX_EPOCHS = 1000;
    static final PrintStream out = new PrintStream(System.out, true);

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: AutoSwitchSlave HOST:PORT DIR SEGMENT_SIZE [--broker-id N] [--sync-from-last-file]"
                + " [--async-learner] [--epochs E:START[,...]] [--report-ms N] [--idle-ms N] [--split SEED]");
            System.exit(2);
        }
        String[] hp = args[0].split(":");
        File dir = new File(args[1]);
        Store store = new Store(dir, Long.parseLong(args[2]));
        long reportMs = 5000, idleMs = 20000, brokerId = 1;
        boolean syncFromLast = false, learner = false;
        Random split = null;
        String seed = null;
        for (int i = 3; i < args.length; i++) {
            switch (args[i]) {
                case "--broker-id": brokerId = Long.parseLong(args[++i]); break;
                case "--sync-from-last-file": syncFromLast = true; break;
                case "--async-learner": learner = true; break;
                case "--epochs": seed = args[++i]; break;
                case "--report-ms": reportMs = Long.parseLong(args[++i]); break;
                case "--idle-ms": idleMs = Long.parseLong(args[++i]); break;
                case "--split": split = new Random(Long.parseLong(args[++i])); break;
                default: fail("unknown option " + args[i]);
            }
        }
        Epochs epochs = new Epochs(new File(dir, "epochFileCheckpoint"));
        if (seed != null) {
            epochs.replace(parseEpochs(seed));
        }

        Socket sock = new Socket();
        sock.setTcpNoDelay(true);
        sock.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
        sock.setSoTimeout((int) idleMs);
        Reporter rep = new Reporter(new DataOutputStream(sock.getOutputStream()));
        out.println("connected " + store.max() + " " + epochs.list.size());
        rep.handshake(syncFromLast, learner, brokerId);

        Reader rd = new Reader(sock.getInputStream(), split, idleMs);
        // 2. the master's handshake
        rd.need(HANDSHAKE_HEADER);
        int state = rd.getInt(0);
        if (state != HANDSHAKE) {
            fail("state " + state + " from the master, want HANDSHAKE");
        }
        int bodySize = rd.getInt(4);
        long masterMax = rd.getLong(8);
        int lastEpoch = rd.getInt(16);
        if (bodySize < 0 || bodySize % 12 != 0 || bodySize / 12 > MAX_EPOCHS || masterMax < 0) {
            fail("master handshake bodySize " + bodySize + " max offset " + masterMax);
        }
        rd.need(HANDSHAKE_HEADER + bodySize);
        List<long[]> master = new ArrayList<>(); // {epoch, start, end}
        for (int i = 0; i < bodySize / 12; i++) {
            long e = rd.getInt(HANDSHAKE_HEADER + 12 * i);
            long s = rd.getLong(HANDSHAKE_HEADER + 12 * i + 4);
            if (s < 0) {
                fail("master epoch " + e + " starts at " + s);
            }
            if (!master.isEmpty()) {
                master.get(master.size() - 1)[2] = s;
            }
            master.add(new long[] {e, s, Long.MAX_VALUE});
        }
        rd.consume(HANDSHAKE_HEADER + bodySize);
        out.println("master-handshake " + masterMax + " " + lastEpoch + " " + master.size());
        for (long[] m : master) {
            out.println("master-epoch " + m[0] + " " + m[1]);
        }

        long reported;
        if (epochs.list.isEmpty()) {
            reported = 0;
            out.println("keep " + store.max());
        } else {
            long point = consistentPoint(epochs.list, store.max(), master, masterMax);
            if (point < 0) {
                out.println("error no consistent point between local epochs " + epochs + " and the master's");
                System.exit(3);
            }
            long from = store.max();
            store.truncate(point);
            epochs.truncateSuffixByOffset(point);
            if (from != point) {
                out.println("truncate " + from + " " + point);
            } else {
                out.println("keep " + point);
            }
            reported = point;
        }
        rep.setReported(reported);
        if (store.max() > reported) {
            rep.ack(store.max());
        }

        final long every = reportMs;
        Thread timer = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(every);
                    rep.ack(rep.reported());
                }
            } catch (Exception e) {
                // the socket closed; the reader reports why
            }
        });
        timer.setDaemon(true);
        timer.start();

        // 3. transfer
        long currentEpoch = Long.MIN_VALUE;
        while (true) {
            rd.fill();
            while (rd.avail() >= 4) {
                state = rd.getInt(0);
                if (state != TRANSFER) {
                    fail("state " + state + " from the master, want TRANSFER");
                }
                if (rd.avail() < TRANSFER_HEADER) {
                    break;
                }
                int size = rd.getInt(4);
                long off = rd.getLong(8);
                int epoch = rd.getInt(16);
                long epochStart = rd.getLong(20);
                long confirm = rd.getLong(28);
                if (size < 0 || size > MAX_BODY || off < 0 || epochStart < 0 || confirm < 0) {
                    fail("transfer header size " + size + " offset " + off + " epoch start " + epochStart + " confirm " + confirm);
                }
                long max = store.max();
                if (max != 0 && off != max) {
                    fail("master pushed offset " + off + ", slave max offset is " + max);
                }
                if (rd.avail() < TRANSFER_HEADER + size) {
                    break;
                }
                for (long[] m : master) {
                    if (m[0] == epoch && (m[1] != epochStart || off < m[1] || off + size > m[2])) {
                        fail("frame [" + off + ", " + (off + size) + ") of epoch " + epoch + " start " + epochStart
                            + " outside the master's epoch [" + m[1] + ", " + m[2] + ")");
                    }
                }
                if (epoch != currentEpoch) {
                    currentEpoch = epoch;
                    if (epochs.append(epoch, epochStart)) {
                        out.println("epoch " + epoch + " " + epochStart);
                    }
                }
                if (size > 0) {
                    store.append(off, rd.buf, rd.start + TRANSFER_HEADER, size);
                }
                long localConfirm = Math.min(confirm, store.max());
                if (size == 0) {
                    out.println("heartbeat " + off + " " + epoch + " " + localConfirm);
                } else {
                    out.println("frame " + off + " " + size + " " + epoch + " " + localConfirm);
                }
                rd.consume(TRANSFER_HEADER + size);
            }
            if (store.max() > rep.reported()) {
                rep.ack(store.max());
            }
        }
    }

    static void fail(String msg) {
        out.println("error " + msg);
        System.exit(2);
    }

    static List<long[]> parseEpochs(String s) {
        List<long[]> es = new ArrayList<>();
        if (s.isEmpty()) {
            return es;
        }
        for (String p : s.split(",")) {
            String[] f = p.split(":");
            es.add(new long[] {Long.parseLong(f[0]), Long.parseLong(f[1])});
        }
        return es;
    }

    /**
     * The consistent point of the local list (last end = localMax) and the
     * master's (last end = masterMax), or -1.
     */
    static long consistentPoint(List<long[]> local, long localMax, List<long[]> master, long masterMax) {
        for (int i = local.size() - 1; i >= 0; i--) {
            long[] l = local.get(i);
            long lend = i + 1 < local.size() ? local.get(i + 1)[1] : localMax;
            for (int j = 0; j < master.size(); j++) {
                long[] m = master.get(j);
                if (m[0] == l[0] && m[1] == l[1]) {
                    long mend = j + 1 < master.size() ? master.get(j + 1)[1] : masterMax;
                    return Math.min(lend, mend);
                }
            }
        }
        return -1;
    }

    /** Reads the socket into one 4 MiB buffer, compacted when full. */
    static final class Reader {
        final InputStream in;
        final Random split;
        final long idleMs;
        final byte[] buf = new byte[BUFFER];
        int start, end;

        Reader(InputStream in, Random split, long idleMs) {
            this.in = in;
            this.split = split;
            this.idleMs = idleMs;
        }

        int avail() { return end - start; }

        int getInt(int i) {
            int p = start + i;
            return (buf[p] & 0xFF) << 24 | (buf[p + 1] & 0xFF) << 16 | (buf[p + 2] & 0xFF) << 8 | (buf[p + 3] & 0xFF);
        }

        long getLong(int i) {
            return ((long) getInt(i) << 32) | (getInt(i + 4) & 0xFFFFFFFFL);
        }

        void consume(int n) {
            start += n;
            if (start == end) {
                start = end = 0;
            }
        }

        void need(int n) throws IOException {
            while (avail() < n) {
                fill();
            }
        }

        void fill() throws IOException {
            if (end == buf.length) {
                System.arraycopy(buf, start, buf, 0, end - start);
                end -= start;
                start = 0;
            }
            int want = buf.length - end;
            if (split != null) {
                want = 1 + split.nextInt(Math.min(want, 3000));
            }
            int n;
            try {
                n = in.read(buf, end, want);
            } catch (SocketTimeoutException e) {
                fail("nothing read for " + idleMs + " ms");
                return;
            }
            if (n < 0) {
                out.println("eof");
                System.exit(1);
            }
            end += n;
        }
    }

    /** Writes the handshake and 12-byte acks; the reader and the timer share it. */
    static final class Reporter {
        private final DataOutputStream w;
        private long reported;

        Reporter(DataOutputStream w) { this.w = w; }

        synchronized void handshake(boolean sync, boolean learner, long id) throws IOException {
            w.writeInt(HANDSHAKE);
            w.writeShort(sync ? 1 : 0);
            w.writeShort(learner ? 1 : 0);
            w.writeLong(id);
            w.flush();
        }

        synchronized void setReported(long v) { reported = v; }

        synchronized long reported() { return reported; }

        synchronized void ack(long v) throws IOException {
            reported = v;
            w.writeInt(TRANSFER);
            w.writeLong(v);
            w.flush();
            out.println("report " + v);
        }
    }

    /** The epoch list, persisted in RocketMQ's epochFileCheckpoint text format. */
    static final class Epochs {
        final File file;
        final List<long[]> list = new ArrayList<>(); // {epoch, start}

        Epochs(File file) throws IOException {
            this.file = file;
            if (!file.exists()) {
                return;
            }
            String[] lines = new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8).split("\n");
            if (lines.length < 2) {
                fail("epoch file " + file + " is too short");
            }
            int count = Integer.parseInt(lines[0].trim());
            long crc = Long.parseLong(lines[1].trim());
            StringBuilder body = new StringBuilder();
            for (int i = 2; i < lines.length; i++) {
                String[] f = lines[i].split("-");
                list.add(new long[] {Long.parseLong(f[0]), Long.parseLong(f[1])});
                body.append(lines[i]).append('\n');
            }
            if (count != list.size() || (crc != 0 && crc != crc(body.toString()))) {
                fail("epoch file " + file + ": count " + count + " crc " + crc + " for " + list.size() + " entries");
            }
        }

        static long crc(String s) {
            CRC32 c = new CRC32();
            c.update(s.getBytes(StandardCharsets.UTF_8));
            return c.getValue() & 0x7FFFFFFFL;
        }

        void replace(List<long[]> es) throws IOException {
            list.clear();
            list.addAll(es);
            persist();
        }

        boolean append(long epoch, long start) throws IOException {
            if (!list.isEmpty()) {
                long[] last = list.get(list.size() - 1);
                if (epoch <= last[0] || start <= last[1]) {
                    return false;
                }
            }
            list.add(new long[] {epoch, start});
            persist();
            return true;
        }

        void truncateSuffixByOffset(long off) throws IOException {
            list.removeIf(e -> e[1] >= off);
            persist();
        }

        private void persist() throws IOException {
            if (list.isEmpty()) {
                Files.deleteIfExists(file.toPath());
                return;
            }
            StringBuilder body = new StringBuilder();
            for (long[] e : list) {
                body.append(e[0]).append('-').append(e[1]).append('\n');
            }
            String text = list.size() + "\n" + crc(body.toString()) + "\n" + body;
            File tmp = new File(file.getPath() + ".tmp");
            Files.write(tmp.toPath(), text.getBytes(StandardCharsets.UTF_8));
            Files.move(tmp.toPath(), file.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        }

        @Override
        public String toString() {
            StringBuilder b = new StringBuilder("[");
            for (long[] e : list) {
                b.append(b.length() > 1 ? " " : "").append(e[0]).append(':').append(e[1]);
            }
            return b.append(']').toString();
        }
    }

    /** The replicated commit log: segment files holding the bytes received. */
    static final class Store {
        private final File dir;
        private final long segSize;
        private RandomAccessFile active;
        private long activeStart = -1;
        private long max;

        Store(File dir, long segSize) throws IOException {
            this.dir = dir;
            this.segSize = segSize;
            if (!dir.isDirectory() && !dir.mkdirs()) {
                throw new IOException("cannot create " + dir);
            }
            String[] names = segments();
            for (int i = 0; i < names.length; i++) {
                long start = Long.parseLong(names[i]);
                long len = new File(dir, names[i]).length();
                if (start % segSize != 0 || len > segSize || (i + 1 < names.length && len != segSize)
                        || (i > 0 && start != activeStart + segSize)) {
                    fail("segment file " + names[i] + " (" + len + " bytes) does not fit segment size " + segSize);
                }
                activeStart = start;
                max = start + len;
            }
            if (activeStart >= 0) {
                active = new RandomAccessFile(new File(dir, names[names.length - 1]), "rw");
            }
        }

        private String[] segments() {
            String[] names = dir.list((d, name) -> name.matches("[0-9]{20}"));
            Arrays.sort(names);
            return names;
        }

        synchronized long max() { return max; }

        /** Cuts the log at off (<= max): later files are deleted, the one holding off is shortened. */
        synchronized void truncate(long off) throws IOException {
            if (off > max) {
                fail("truncate to " + off + " beyond the max offset " + max);
            }
            if (active != null) {
                active.close();
                active = null;
            }
            activeStart = -1;
            for (String n : segments()) {
                long start = Long.parseLong(n);
                File f = new File(dir, n);
                if (start >= off) {
                    if (!f.delete()) {
                        throw new IOException("cannot delete " + f);
                    }
                    continue;
                }
                if (start + f.length() > off) {
                    try (RandomAccessFile r = new RandomAccessFile(f, "rw")) {
                        r.setLength(off - start);
                    }
                }
                activeStart = start;
            }
            if (activeStart >= 0) {
                active = new RandomAccessFile(new File(dir, String.format("%020d", activeStart)), "rw");
            } else if (off % segSize != 0) {
                fail("truncation point " + off + " is below the local log's first segment and not a segment start");
            }
            max = off;
        }

        synchronized void append(long off, byte[] b, int from, int len) throws IOException {
            if (active == null) {
                if (off % segSize != 0 || (max != 0 && off != max)) {
                    fail("first frame at " + off + " on an empty log is not a segment start");
                }
                max = off;
                open(off);
            } else if (max == activeStart + segSize) {
                open(max);
            }
            if (max - activeStart + len > segSize) {
                fail("frame [" + off + ", " + (off + len) + ") crosses the segment end " + (activeStart + segSize));
            }
            active.seek(max - activeStart);
            active.write(b, from, len);
            max += len;
        }

        private void open(long start) throws IOException {
            if (active != null) {
                active.close();
            }
            active = new RandomAccessFile(new File(dir, String.format("%020d", start)), "rw");
            activeStart = start;
        }
    }
}
