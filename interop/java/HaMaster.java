// HaMaster is a minimal RocketMQ 4.x classic HA master, written from
// replicator's protocol description (not from RocketMQ's code) as an
// independent second implementation for the interop tests.
//
//   java HaMaster PORT DIR SEGMENT_SIZE [--batch N] [--heartbeat-ms N] [--idle-ms N] [--split SEED]
//
// It owns a commit log in DIR laid out as RocketMQ lays it out: segment files
// of exactly SEGMENT_SIZE bytes named by their start offset (20 digits),
// records in message format v1, and the 8-byte end-of-file filler
// [remaining i32][0xCBD43194] when a record plus 8 bytes does not fit the
// rest of a segment (the rest of that segment counts as written).
//
// Commands on standard input, one per line:
//   append COUNT MAXBODY   append COUNT records to topic TopicTest; record n
//                          (counting from 0 over the log's life) has body
//                          length 1 + (n * 7919) % MAXBODY, body byte i =
//                          (n * 131 + i * 7) & 0xFF, queue n % 4, property
//                          KEYS = "k" + n (encoded as RocketMQ 4.9.1-4.9.8 do: no
//                          trailing \u0002); prints "appended MAX"
//   quit                   exit
//
// Serving each slave connection (two threads):
//   reader  per socket read, the last complete 8-byte value (aligned from the
//           start of the stream) is the slave's report; the first report is
//           the request offset; a later report beyond the max offset closes
//           the connection (RocketMQ 4.9.3+).
//   writer  nothing before the request; then it starts at the request, or for
//           a request of 0 at max - max % SEGMENT_SIZE (RocketMQ 4.x); sends
//           [offset i64][size i32][body] frames with size <= --batch that never
//           cross a segment end; after --heartbeat-ms without sending it sends
//           [next][0]. An offset outside the log gets heartbeats only.
// --split writes each frame in random small pieces.
//
// Standard output, one event per line: "listening PORT", "accepted",
// "report V", "start NEXT REQUEST", "frame OFFSET SIZE", "heartbeat OFFSET",
// "appended MAX", "closed REASON".

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
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
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.zip.CRC32;

public final class HaMaster {
    static final int MAGIC = 0xDAA320A7;
    static final int BLANK_MAGIC = 0xCBD43194;
    static final int FILLER = 8;
    static final PrintStream out = new PrintStream(System.out, true);

    static int batch = 32 * 1024;
    static long heartbeatMs = 5000;
    static int idleMs = 20000;
    static long splitSeed = -1;

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: HaMaster PORT DIR SEGMENT_SIZE [--batch N] [--heartbeat-ms N] [--idle-ms N] [--split SEED]");
            System.exit(2);
        }
        for (int i = 3; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--batch": batch = Integer.parseInt(args[i + 1]); break;
                case "--heartbeat-ms": heartbeatMs = Long.parseLong(args[i + 1]); break;
                case "--idle-ms": idleMs = Integer.parseInt(args[i + 1]); break;
                case "--split": splitSeed = Long.parseLong(args[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        Log log = new Log(new File(args[1]), Long.parseLong(args[2]));
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
            if (f[0].equals("append") && f.length == 3) {
                long max = log.appendMessages(Integer.parseInt(f[1]), Integer.parseInt(f[2]));
                out.println("appended " + max);
            } else if (f[0].equals("quit")) {
                break;
            } else if (!f[0].isEmpty()) {
                out.println("error unknown command " + line);
            }
        }
        System.exit(0);
    }

    /** The commit log: full-size segment files, records, fillers. */
    static final class Log {
        private final File dir;
        private final long segSize;
        private final TreeMap<Long, RandomAccessFile> segs = new TreeMap<>();
        private final Map<Integer, Long> queueOffsets = new HashMap<>();
        private long max;
        private long seq;

        Log(File dir, long segSize) throws IOException {
            this.dir = dir;
            this.segSize = segSize;
            if (!dir.isDirectory() && !dir.mkdirs()) {
                throw new IOException("cannot create " + dir);
            }
        }

        synchronized long max() { return max; }

        synchronized long appendMessages(int count, int maxBody) throws IOException {
            for (int k = 0; k < count; k++, seq++) {
                byte[] body = new byte[1 + (int) ((seq * 7919) % maxBody)];
                for (int i = 0; i < body.length; i++) {
                    body[i] = (byte) (seq * 131 + i * 7);
                }
                int queue = (int) (seq % 4);
                append(encode(body, "TopicTest", queue, "KEYS\u0001k" + seq));
            }
            notifyAll(); // wake the writers
            return max;
        }

        /** Encodes a message format v1 record; physical and queue offsets are set by append. */
        private static ByteBuffer encode(byte[] body, String topic, int queue, String props) {
            byte[] t = topic.getBytes(StandardCharsets.UTF_8);
            byte[] p = props.getBytes(StandardCharsets.UTF_8);
            int size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + body.length + 1 + t.length + 2 + p.length;
            CRC32 crc = new CRC32();
            crc.update(body);
            long now = System.currentTimeMillis();
            ByteBuffer r = ByteBuffer.allocate(size); // big-endian
            r.putInt(size).putInt(MAGIC).putInt((int) (crc.getValue() & 0x7FFFFFFF)).putInt(queue).putInt(0);
            r.putLong(0).putLong(0); // QUEUEOFFSET, PHYSICALOFFSET: filled in by append
            r.putInt(0); // SYSFLAG: IPv4 hosts
            r.putLong(now).put(new byte[] {127, 0, 0, 1}).putInt(40000); // born time and host
            r.putLong(now).put(new byte[] {127, 0, 0, 1}).putInt(10911); // store time and host
            r.putInt(0).putLong(0); // RECONSUMETIMES, PREPARED TRANSACTION OFFSET
            r.putInt(body.length).put(body);
            r.put((byte) t.length).put(t);
            r.putShort((short) p.length).put(p);
            return r;
        }

        private void append(ByteBuffer r) throws IOException {
            int size = r.capacity();
            if (size + FILLER > segSize) {
                throw new IOException("record of " + size + " bytes cannot fit a segment");
            }
            long start = segs.isEmpty() ? -1 : segs.lastKey();
            if (start < 0 || max == start + segSize) {
                start = roll(max);
            }
            long rest = start + segSize - max;
            if (size + FILLER > rest) {
                ByteBuffer f = ByteBuffer.allocate(FILLER).putInt((int) rest).putInt(BLANK_MAGIC);
                write(start, max, f.array());
                max = start + segSize;
                start = roll(max);
            }
            int queue = r.getInt(12);
            long qo = queueOffsets.getOrDefault(queue, 0L);
            queueOffsets.put(queue, qo + 1);
            r.putLong(20, qo).putLong(28, max);
            write(start, max, r.array());
            max += size;
        }

        private long roll(long start) throws IOException {
            RandomAccessFile f = new RandomAccessFile(new File(dir, String.format("%020d", start)), "rw");
            f.setLength(segSize); // full size, zeros, as RocketMQ preallocates
            segs.put(start, f);
            return start;
        }

        private void write(long segStart, long off, byte[] b) throws IOException {
            RandomAccessFile f = segs.get(segStart);
            f.seek(off - segStart);
            f.write(b);
        }

        /**
         * Bytes readable at off within off's segment, at most limit: 0 when off
         * is outside [first segment start, max).
         */
        synchronized int readable(long off, int limit) {
            if (segs.isEmpty() || off < segs.firstKey() || off >= max) {
                return 0;
            }
            long segStart = segs.floorKey(off);
            return (int) Math.min(limit, Math.min(max, segStart + segSize) - off);
        }

        synchronized byte[] read(long off, int n) throws IOException {
            long segStart = segs.floorKey(off);
            RandomAccessFile f = segs.get(segStart);
            byte[] b = new byte[n];
            f.seek(off - segStart);
            f.readFully(b);
            return b;
        }

        /** Waits up to ms for an append (or a closed connection's wake-up). */
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
        private long request = -1;
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
            byte[] buf = new byte[1 << 20];
            int pos = 0, done = 0;
            try {
                InputStream in = sock.getInputStream();
                while (!closed) {
                    if (pos == buf.length) { // a multiple of 8: alignment holds
                        pos = 0;
                        done = 0;
                    }
                    int n = in.read(buf, pos, buf.length - pos);
                    if (n < 0) {
                        close("eof");
                        return;
                    }
                    pos += n;
                    if (pos - done >= 8) {
                        int last = pos - pos % 8;
                        long v = ByteBuffer.wrap(buf, last - 8, 8).getLong();
                        done = last;
                        out.println("report " + v);
                        synchronized (lock) {
                            if (request < 0) {
                                request = v;
                                lock.notifyAll();
                            } else if (v > log.max()) {
                                close("ack " + v + " beyond max offset " + log.max());
                                return;
                            }
                        }
                    }
                }
            } catch (IOException e) {
                close("read: " + e);
            }
        }

        void writeLoop() {
            try {
                long req;
                synchronized (lock) {
                    while (request < 0 && !closed) {
                        lock.wait();
                    }
                    req = request;
                }
                if (closed) {
                    return;
                }
                long max = log.max();
                long next = req == 0 ? max - max % log.segSize : req;
                out.println("start " + next + " " + req);
                OutputStream os = sock.getOutputStream();
                Random split = splitSeed < 0 ? null : new Random(splitSeed);
                long lastWrite = System.currentTimeMillis();
                while (!closed) {
                    int n = log.readable(next, batch);
                    if (n > 0) {
                        byte[] body = log.read(next, n);
                        send(os, split, next, body);
                        out.println("frame " + next + " " + n);
                        next += n;
                        lastWrite = System.currentTimeMillis();
                        continue;
                    }
                    long idle = System.currentTimeMillis() - lastWrite;
                    if (idle >= heartbeatMs) {
                        send(os, split, next, new byte[0]);
                        out.println("heartbeat " + next);
                        lastWrite = System.currentTimeMillis();
                        continue;
                    }
                    log.await(Math.min(100, heartbeatMs - idle)); // RocketMQ's writer idles 100 ms at most
                }
            } catch (IOException | InterruptedException e) {
                close("write: " + e);
            }
        }

        private static void send(OutputStream os, Random split, long off, byte[] body) throws IOException {
            byte[] frame = ByteBuffer.allocate(12 + body.length).putLong(off).putInt(body.length).put(body).array();
            if (split == null) {
                os.write(frame);
            } else {
                for (int i = 0; i < frame.length; ) {
                    int n = Math.min(frame.length - i, 1 + split.nextInt(3000));
                    os.write(frame, i, n);
                    os.flush();
                    i += n;
                }
            }
            os.flush();
        }
    }
}
