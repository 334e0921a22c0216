// AutoSwitchMaster is a minimal master of RocketMQ 5's controller-mode
// ("AutoSwitch") HA protocol, written from replicator's protocol description
// (shared/docs/rocketmq-ha-spec.md section 10, transport/doc.go), not from
// RocketMQ's code, as an independent second implementation for the interop
// tests.
//
//   java AutoSwitchMaster PORT DIR SEGMENT_SIZE --epochs E:START[,E:START...]
//        [--max N] [--batch N] [--heartbeat-ms N] [--idle-ms N] [--split SEED]
//        [--confirm-ack] [--bad-state-frame N]
//
// It serves the commit-log bytes found in DIR: segment files named by their
// start offset (20 digits), either full-size RocketMQ files or files holding
// only the bytes written so far. The log spans [first file's start, max);
// max is --max, else the last file's start plus its length. --epochs is the
// master's epoch list, ascending in epoch and start offset; the last epoch
// has no end.
//
// Commands on standard input, one per line:
//   grow MAX   serve the log up to MAX (the bytes must be in the files); prints
//              "grown MAX"
//   epoch E    start epoch E at the current max offset (the same broker elected
//              again: connections keep running and move to E once they reach
//              the old epoch's new end); prints "epoch E START"
//   quit       exit
//
// Protocol (all integers big-endian; state = HAConnectionState ordinal):
//   slave -> master   [1][syncFromLastFile i16][asyncLearner i16][brokerId i64]
//                     [2][ack i64]
//   master -> slave   [1][12N][maxOffset i64][lastEpoch i32] N x [epoch i32][start i64]
//                     [2][size i32][offset i64][epoch i32][epochStart i64][confirm i64][body]
//
// Serving each connection (two threads):
//   reader  reads 16-byte handshakes and 12-byte acks; any other state closes
//           the connection. The first ack after a handshake is the request.
//   writer  waits for the slave's handshake, answers with the epoch list and
//           the max offset, then waits for the first ack and starts there; an
//           ack of 0 starts at the log's first byte, or with the slave's
//           syncFromLastFile flag at the start of the last segment. It sends
//           transfer frames of at most --batch bytes that never cross the end
//           of their epoch or of a segment, each carrying the epoch that holds
//           it and that epoch's start; after --heartbeat-ms without sending it
//           sends a heartbeat (size 0, offset = next offset). The confirm
//           offset is the max offset (RocketMQ's default, one-member
//           SyncStateSet), or with --confirm-ack min(max, the slave's last ack).
//           A new handshake from the slave restarts this sequence.
// --split writes each frame in random small pieces. --bad-state-frame N sends
// the Nth transfer frame of the process (once, counting from 1) with the state
// SUSPEND (3) instead of TRANSFER, to check that a slave drops the connection.
//
// Standard output, one event per line: "listening PORT", "accepted",
// "handshake BROKERID SYNC LEARNER", "ack V", "sent-handshake MAX LASTEPOCH N",
// "start NEXT REQUEST EPOCH", "frame OFFSET SIZE EPOCH", "heartbeat OFFSET
// EPOCH", "bad-state-frame OFFSET SIZE", "grown MAX", "epoch E START",
// "closed REASON", "error MESSAGE".

import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;

public final class AutoSwitchMaster {
    static final int HANDSHAKE = 1;
    static final int TRANSFER = 2;
    static final int MAX_EPOCHS = 1000;
    static final PrintStream out = new PrintStream(System.out, true);

    static int batch = 32 * 1024;
    static long heartbeatMs = 5000;
    static int idleMs = 20000;
    static long splitSeed = -1;
    static boolean confirmAck;
    static final AtomicLong badStateFrame = new AtomicLong(-1); // frames left before the bad one

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: AutoSwitchMaster PORT DIR SEGMENT_SIZE --epochs E:START[,...] [--max N] [--batch N]"
                + " [--heartbeat-ms N] [--idle-ms N] [--split SEED] [--confirm-ack]");
            System.exit(2);
        }
        long max = -1;
        String epochs = null;
        for (int i = 3; i < args.length; i++) {
            switch (args[i]) {
                case "--epochs": epochs = args[++i]; break;
                case "--max": max = Long.parseLong(args[++i]); break;
                case "--batch": batch = Integer.parseInt(args[++i]); break;
                case "--heartbeat-ms": heartbeatMs = Long.parseLong(args[++i]); break;
                case "--idle-ms": idleMs = Integer.parseInt(args[++i]); break;
                case "--split": splitSeed = Long.parseLong(args[++i]); break;
                case "--confirm-ack": confirmAck = true; break;
                case "--bad-state-frame": badStateFrame.set(Long.parseLong(args[++i])); break;
                default: fail("unknown option " + args[i]);
            }
        }
        if (epochs == null) {
            fail("--epochs is required");
        }
        Log log = new Log(new File(args[1]), Long.parseLong(args[2]), max, parseEpochs(epochs));
        ServerSocket ss = new ServerSocket();
        ss.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), Integer.parseInt(args[0])));
        out.println("listening " + ss.getLocalPort());

        Thread acceptor = new Thread(() -> {
            while (true) {
                try {
                    Socket s = ss.accept();
                    s.setTcpNoDelay(true);
                    s.setSoTimeout(idleMs);
                    out.println("accepted");
                    new Conn(log, s).start();
                } catch (IOException e) {
                    return;
                }
            }
        });
        acceptor.setDaemon(true);
        acceptor.start();

        BufferedReader cmds = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = cmds.readLine()) != null; ) {
            String[] f = line.trim().split("\\s+");
            if (f[0].equals("grow") && f.length == 2) {
                log.grow(Long.parseLong(f[1]));
                out.println("grown " + log.max());
            } else if (f[0].equals("epoch") && f.length == 2) {
                log.newEpoch(Integer.parseInt(f[1]));
            } else if (f[0].equals("quit")) {
                break;
            } else if (!f[0].isEmpty()) {
                out.println("error unknown command " + line);
            }
        }
        System.exit(0);
    }

    static void fail(String msg) {
        out.println("error " + msg);
        System.exit(2);
    }

    /** One epoch entry: [start, end); end is Long.MAX_VALUE for the last one. */
    static final class Epoch {
        final int epoch;
        final long start;
        volatile long end = Long.MAX_VALUE;

        Epoch(int epoch, long start) {
            this.epoch = epoch;
            this.start = start;
        }
    }

    static List<Epoch> parseEpochs(String s) {
        List<Epoch> es = new CopyOnWriteArrayList<>();
        for (String p : s.split(",")) {
            String[] f = p.split(":");
            if (f.length != 2) {
                fail("bad epoch entry " + p);
            }
            Epoch e = new Epoch(Integer.parseInt(f[0]), Long.parseLong(f[1]));
            if (!es.isEmpty()) {
                Epoch last = es.get(es.size() - 1);
                if (e.epoch <= last.epoch || e.start < last.start) {
                    fail("epoch " + e.epoch + ":" + e.start + " does not follow " + last.epoch + ":" + last.start);
                }
                last.end = e.start;
            }
            es.add(e);
        }
        if (es.isEmpty() || es.size() > MAX_EPOCHS) {
            fail(es.size() + " epoch entries");
        }
        return es;
    }

    /** The served commit log: segment files in a directory, and the epochs. */
    static final class Log {
        final long segSize;
        final List<Epoch> epochs;
        private final TreeMap<Long, RandomAccessFile> segs = new TreeMap<>();
        private long max;

        Log(File dir, long segSize, long max, List<Epoch> epochs) throws IOException {
            this.segSize = segSize;
            this.epochs = epochs;
            String[] names = dir.list((d, name) -> name.matches("[0-9]{20}"));
            if (names == null || names.length == 0) {
                throw new IOException("no segment files in " + dir);
            }
            Arrays.sort(names);
            long end = 0;
            for (String n : names) {
                long start = Long.parseLong(n);
                File f = new File(dir, n);
                if (start % segSize != 0 || f.length() > segSize || (!segs.isEmpty() && start != segs.lastKey() + segSize)) {
                    throw new IOException("segment file " + n + " (" + f.length() + " bytes) does not fit segment size " + segSize);
                }
                segs.put(start, new RandomAccessFile(f, "r"));
                end = start + f.length();
            }
            this.max = max < 0 ? end : max;
            if (this.max > end || this.max < segs.firstKey()) {
                throw new IOException("max " + this.max + " outside the files [" + segs.firstKey() + ", " + end + ")");
            }
        }

        synchronized long min() { return segs.firstKey(); }

        synchronized long max() { return max; }

        synchronized void grow(long m) throws IOException {
            long end = segs.lastKey() + segs.lastEntry().getValue().length();
            if (m < max || m > end) {
                out.println("error grow " + m + " outside [" + max + ", " + end + "]");
                return;
            }
            max = m;
            notifyAll();
        }

        /** Start of the segment holding the last byte (RocketMQ's last file). */
        /** Starts epoch e at the max offset. */
        synchronized void newEpoch(int e) {
            Epoch last = epochs.get(epochs.size() - 1);
            if (e <= last.epoch || max <= last.start || epochs.size() == MAX_EPOCHS) {
                out.println("error epoch " + e + " at " + max + " does not follow " + last.epoch + ":" + last.start);
                return;
            }
            Epoch n = new Epoch(e, max);
            epochs.add(n);
            last.end = max;
            out.println("epoch " + e + " " + max);
            notifyAll();
        }

        synchronized long lastFileStart() {
            return max == 0 ? 0 : (max - 1) - (max - 1) % segSize;
        }

        /** The epoch holding offset off, or null when off is before the first epoch. */
        Epoch epochAt(long off) {
            for (Epoch e : epochs) {
                if (e.start <= off && off < e.end) {
                    return e;
                }
            }
            return null;
        }

        /** Bytes readable at off within its segment, at most limit (0 outside [min, max)). */
        synchronized int readable(long off, int limit) {
            if (off < segs.firstKey() || off >= max) {
                return 0;
            }
            long segStart = off - off % segSize;
            return (int) Math.min(limit, Math.min(max, segStart + segSize) - off);
        }

        synchronized byte[] read(long off, int n) throws IOException {
            RandomAccessFile f = segs.get(off - off % segSize);
            byte[] b = new byte[n];
            f.seek(off % segSize);
            f.readFully(b);
            return b;
        }

        synchronized void await(long ms) throws InterruptedException {
            if (ms > 0) {
                wait(ms);
            }
        }
    }

    /** One slave connection: a reader and a writer thread. */
    static final class Conn {
        private final Log log;
        private final Socket sock;
        private final Object lock = new Object();
        private boolean handshakePending;
        private boolean syncFromLastFile;
        private long request = -1; // first ack since the last handshake
        private long lastAck = -1;
        private volatile boolean closed;

        Conn(Log log, Socket sock) {
            this.log = log;
            this.sock = sock;
        }

        void start() {
            Thread r = new Thread(this::readLoop);
            Thread w = new Thread(this::writeLoop);
            r.setDaemon(true);
            w.setDaemon(true);
            r.start();
            w.start();
        }

        void close(String reason) {
            synchronized (lock) {
                if (closed) {
                    return;
                }
                closed = true;
                lock.notifyAll();
            }
            try {
                sock.close();
            } catch (IOException e) {
                // closing anyway
            }
            out.println("closed " + reason);
        }

        void readLoop() {
            try {
                DataInputStream in = new DataInputStream(sock.getInputStream());
                while (!closed) {
                    int state;
                    try {
                        state = in.readInt();
                    } catch (EOFException e) {
                        close("eof");
                        return;
                    }
                    if (state == HANDSHAKE) {
                        short sync = in.readShort();
                        short learner = in.readShort();
                        long id = in.readLong();
                        out.println("handshake " + id + " " + sync + " " + learner);
                        synchronized (lock) {
                            handshakePending = true;
                            syncFromLastFile = sync == 1;
                            request = -1;
                            lock.notifyAll();
                        }
                    } else if (state == TRANSFER) {
                        long ack = in.readLong();
                        out.println("ack " + ack);
                        if (ack < 0) {
                            close("negative ack " + ack);
                            return;
                        }
                        synchronized (lock) {
                            lastAck = ack;
                            if (request < 0) {
                                request = ack;
                                lock.notifyAll();
                            }
                        }
                    } else {
                        close("bad state " + state);
                        return;
                    }
                }
            } catch (IOException e) {
                close("read: " + e);
            }
        }

        void writeLoop() {
            try {
                OutputStream os = sock.getOutputStream();
                Random split = splitSeed < 0 ? null : new Random(splitSeed);
                while (!closed) {
                    synchronized (lock) {
                        while (!handshakePending && !closed) {
                            lock.wait();
                        }
                        handshakePending = false;
                    }
                    if (closed) {
                        return;
                    }
                    sendHandshake(os, split);
                    serve(os, split);
                }
            } catch (IOException | InterruptedException e) {
                close("write: " + e);
            }
        }

        private void sendHandshake(OutputStream os, Random split) throws IOException {
            long max = log.max();
            List<Epoch> es = log.epochs;
            ByteBuffer b = ByteBuffer.allocate(20 + 12 * es.size());
            b.putInt(HANDSHAKE).putInt(12 * es.size()).putLong(max).putInt(es.get(es.size() - 1).epoch);
            for (Epoch e : es) {
                b.putInt(e.epoch).putLong(e.start);
            }
            write(os, split, b.array());
            out.println("sent-handshake " + max + " " + es.get(es.size() - 1).epoch + " " + es.size());
        }

        /** Transfers until the connection closes or the slave handshakes again. */
        private void serve(OutputStream os, Random split) throws IOException, InterruptedException {
            long req;
            boolean fromLast;
            synchronized (lock) {
                while (request < 0 && !handshakePending && !closed) {
                    lock.wait();
                }
                if (request < 0) {
                    return;
                }
                req = request;
                fromLast = syncFromLastFile;
            }
            long next = req != 0 ? req : fromLast ? log.lastFileStart() : log.min();
            Epoch cur = log.epochAt(next);
            out.println("start " + next + " " + req + " " + (cur == null ? -1 : cur.epoch));
            long lastWrite = System.currentTimeMillis();
            while (!closed) {
                synchronized (lock) {
                    if (handshakePending) {
                        return;
                    }
                }
                if (cur == null) { // nothing covers next yet: heartbeats only
                    cur = log.epochAt(next);
                }
                if (cur != null && next == cur.end) {
                    int i = log.epochs.indexOf(cur);
                    cur = log.epochs.get(i + 1); // cur.end is finite: a next epoch exists
                    continue;
                }
                int n = log.readable(next, batch);
                // cur.end is read after readable: an epoch started at runtime
                // sets it before any byte of the new epoch becomes readable.
                long end = cur == null ? Long.MAX_VALUE : cur.end;
                if (end != Long.MAX_VALUE) {
                    n = (int) Math.min(n, end - next);
                }
                if (n > 0 && cur != null) {
                    byte[] body = log.read(next, n);
                    byte[] f = frame(next, cur, body);
                    if (badStateFrame.get() > 0 && badStateFrame.decrementAndGet() == 0) {
                        f[3] = 3; // SUSPEND
                        write(os, split, f);
                        out.println("bad-state-frame " + next + " " + n);
                        continue; // the slave must drop the connection: this frame does not count
                    }
                    write(os, split, f);
                    out.println("frame " + next + " " + n + " " + cur.epoch);
                    next += n;
                    lastWrite = System.currentTimeMillis();
                    continue;
                }
                long idle = System.currentTimeMillis() - lastWrite;
                if (idle >= heartbeatMs) {
                    Epoch hb = cur != null ? cur : log.epochs.get(0);
                    write(os, split, frame(next, hb, new byte[0]));
                    out.println("heartbeat " + next + " " + hb.epoch);
                    lastWrite = System.currentTimeMillis();
                    continue;
                }
                log.await(Math.min(100, heartbeatMs - idle));
            }
        }

        private byte[] frame(long off, Epoch e, byte[] body) {
            long confirm = log.max();
            if (confirmAck) {
                synchronized (lock) {
                    confirm = Math.max(0, Math.min(confirm, lastAck));
                }
            }
            return ByteBuffer.allocate(36 + body.length).putInt(TRANSFER).putInt(body.length).putLong(off)
                .putInt(e.epoch).putLong(e.start).putLong(confirm).put(body).array();
        }

        private static void write(OutputStream os, Random split, byte[] b) throws IOException {
            if (split == null) {
                os.write(b);
            } else {
                for (int i = 0; i < b.length; ) {
                    int n = Math.min(b.length - i, 1 + split.nextInt(3000));
                    os.write(b, i, n);
                    os.flush();
                    i += n;
                }
            }
            os.flush();
        }
    }
}
