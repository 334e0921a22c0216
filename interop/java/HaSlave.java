// HaSlave is a minimal RocketMQ 4.x classic HA slave, written from
// replicator's protocol description (not from RocketMQ's code) as an
// independent second implementation for the interop tests.
//
//   java HaSlave HOST:PORT DIR SEGMENT_SIZE [--report-ms N] [--split SEED] [--idle-ms N]
//                [--first-report-ms N]
//
// It keeps the replicated commit log in DIR as segment files named by their
// start offset (20 digits); each file holds only the bytes received so far,
// so the log's max offset is the last file's start plus its length.
//
// Protocol (all integers big-endian):
//   slave -> master  [max offset i64]                 right after connecting,
//                                                      after each read that grew
//                                                      the log, every --report-ms
//   master -> slave  [offset i64][size i32][body]     size 0 = heartbeat
//
// Checks, each fatal (a line "error ..." and exit status 2): a size outside
// [0, 4 MiB - 12]; a frame offset other than the local max offset once the
// log is not empty (heartbeats included); a first frame on an empty log that
// does not start a segment; a body that crosses a segment end; with
// --first-report-ms (RocketMQ 4.x sends its first report about 5 s after
// connecting), any byte received before that first report. --split reads
// the socket in random small pieces, so frames arrive split at any byte.
//
// Standard output, one event per line: "connected MAX", "report V",
// "frame OFFSET SIZE", "heartbeat OFFSET", "eof", "error MESSAGE".

import java.io.DataOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.Arrays;
import java.util.Random;

public final class HaSlave {
    static final int HEADER = 12;
    static final int BUFFER = 4 << 20;
    static final int MAX_BODY = BUFFER - HEADER;
    static final PrintStream out = new PrintStream(System.out, true);

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: HaSlave HOST:PORT DIR SEGMENT_SIZE [--report-ms N] [--split SEED] [--idle-ms N] [--first-report-ms N]");
            System.exit(2);
        }
        String[] hp = args[0].split(":");
        Store store = new Store(new File(args[1]), Long.parseLong(args[2]));
        long reportMs = 5000, idleMs = 20000, firstReportMs = 0;
        Random split = null;
        for (int i = 3; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--report-ms": reportMs = Long.parseLong(args[i + 1]); break;
                case "--idle-ms": idleMs = Long.parseLong(args[i + 1]); break;
                case "--split": split = new Random(Long.parseLong(args[i + 1])); break;
                case "--first-report-ms": firstReportMs = Long.parseLong(args[i + 1]); break;
                default: fail("unknown option " + args[i]);
            }
        }

        Socket sock = new Socket();
        sock.setTcpNoDelay(true);
        sock.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
        sock.setSoTimeout((int) idleMs);
        Reporter rep = new Reporter(new DataOutputStream(sock.getOutputStream()));
        out.println("connected " + store.max());
        if (firstReportMs > 0) {
            Thread.sleep(firstReportMs);
            int early = sock.getInputStream().available();
            if (early > 0) {
                fail("master sent " + early + " bytes before the first report");
            }
        }
        rep.send(store.max()); // the request offset

        final long every = reportMs;
        Thread timer = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(every);
                    rep.send(store.max());
                }
            } catch (Exception e) {
                // the socket closed; the reader reports why
            }
        });
        timer.setDaemon(true);
        timer.start();

        InputStream in = sock.getInputStream();
        byte[] buf = new byte[BUFFER];
        int start = 0, end = 0;
        while (true) {
            if (end == buf.length) { // keep the partial frame, make room after it
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
            boolean grew = false;
            while (end - start >= HEADER) {
                long off = getLong(buf, start);
                int size = getInt(buf, start + 8);
                if (size < 0 || size > MAX_BODY) {
                    fail("frame at " + off + ": size " + size + " outside [0, " + MAX_BODY + "]");
                }
                long max = store.max();
                if (max != 0 && off != max) {
                    fail("master pushed offset " + off + ", slave max offset is " + max);
                }
                if (end - start < HEADER + size) {
                    break; // the body is still on its way
                }
                if (size == 0) {
                    out.println("heartbeat " + off);
                } else {
                    store.append(off, buf, start + HEADER, size);
                    out.println("frame " + off + " " + size);
                    grew = true;
                }
                start += HEADER + size;
            }
            if (start == end) {
                start = end = 0;
            }
            if (grew) {
                rep.send(store.max());
            }
        }
    }

    static void fail(String msg) {
        out.println("error " + msg);
        System.exit(2);
    }

    static long getLong(byte[] b, int i) {
        return ((long) getInt(b, i) << 32) | (getInt(b, i + 4) & 0xFFFFFFFFL);
    }

    static int getInt(byte[] b, int i) {
        return (b[i] & 0xFF) << 24 | (b[i + 1] & 0xFF) << 16 | (b[i + 2] & 0xFF) << 8 | (b[i + 3] & 0xFF);
    }

    /** Writes 8-byte reports; the reader and the timer share it. */
    static final class Reporter {
        private final DataOutputStream w;

        Reporter(DataOutputStream w) { this.w = w; }

        synchronized void send(long v) throws IOException {
            w.writeLong(v);
            w.flush();
            out.println("report " + v);
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
            String[] names = dir.list((d, name) -> name.matches("[0-9]{20}"));
            Arrays.sort(names);
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

        synchronized long max() { return max; }

        synchronized void append(long off, byte[] b, int from, int len) throws IOException {
            if (active == null) {
                if (off % segSize != 0) {
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
