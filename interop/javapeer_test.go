package interop

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// TestJavaPeers compiles the Java HA peers once (into its t.TempDir()) and
// runs replicator against them: core's master and slave over real TCP, and
// the replicator daemon.
func TestJavaPeers(t *testing.T) {
	classes := javaClasses(t)
	t.Run("GoMasterToJavaSlave", func(t *testing.T) { testJavaSlaveOfGoMaster(t, classes) })
	t.Run("GoMasterToJavaSlaveFromFirstSegment", func(t *testing.T) { testJavaSlaveOfGoMasterFromFirstSegment(t, classes) })
	t.Run("JavaMasterToGoSlave", func(t *testing.T) { testGoSlaveOfJavaMaster(t, classes) })
	t.Run("SyncMasterWithJavaSlave", func(t *testing.T) { testSyncMasterWithJavaSlave(t, classes) })
	t.Run("StartRuleAtSegmentEnd", func(t *testing.T) { testStartRuleAtSegmentEnd(t, classes) })
	t.Run("DaemonMasterToJavaSlave", func(t *testing.T) { testDaemonMasterToJavaSlave(t, classes) })
	t.Run("JavaMasterToDaemonSlave", func(t *testing.T) { testJavaMasterToDaemonSlave(t, classes) })
}

// Geometry shared by the Java-peer tests: small segments so that a few MiB
// of log span many of them, RocketMQ's 32 KiB transfer batch.
const (
	segSize   = 256 << 10
	batchSize = 32 << 10
)

// openLog opens a commit log with segSize segments in dir; closed at the end
// of the test unless the test closes it first.
func openLog(t *testing.T, dir string) *commitlog.Log {
	t.Helper()
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = segSize
	lg, err := commitlog.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	return lg
}

// startGoMaster starts a core.Master on lg listening on 127.0.0.1.
func startGoMaster(t *testing.T, lg *commitlog.Log, cfg core.MasterConfig) *core.Master {
	t.Helper()
	cfg.ListenAddr = "127.0.0.1:0"
	m, err := core.NewMaster(lg, tcptransport.New(tcptransport.DefaultOptions()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// putMessages appends messages [from, from+n) through the master: message k
// has a body of 1 + k*4099 % 8192 bytes (so fillers land at varied places)
// and key "k<k>".
func putMessages(t *testing.T, m *core.Master, from, n int) {
	t.Helper()
	for k := from; k < from+n; k++ {
		body := make([]byte, 1+k*4099%8192)
		for i := range body {
			body[i] = byte(k + i*13)
		}
		msg := &record.Message{Topic: "TopicTest", QueueID: int32(k % 4), Body: body, Properties: map[string]string{"KEYS": "k" + strconv.Itoa(k)}}
		res, err := m.Put(context.Background(), msg)
		if err != nil || res.Status != core.PutOK {
			t.Fatalf("put %d: %v %v", k, res.Status, err)
		}
	}
}

// startJava runs a Java peer class from classes.
func startJava(t *testing.T, classes, label, class string, args ...string) *proc {
	t.Helper()
	return startProc(t, label, nil, "", "java", append([]string{"-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m", "-cp", classes, class}, args...)...)
}

// checkFrames checks the "frame OFFSET SIZE" lines of a Java peer: bodies of
// 1..batchSize bytes, contiguous, none across a segment end. It returns the
// first frame's offset.
func checkFrames(t *testing.T, p *proc) int64 {
	t.Helper()
	// An ack can reach the master before the peer's output is read.
	p.waitLine(`^frame `)
	frames := p.events("frame")
	if len(frames) == 0 {
		t.Fatalf("%s saw no frames", p.name)
	}
	for i, f := range frames {
		off, size := f[0], f[1]
		if size < 1 || size > batchSize {
			t.Fatalf("%s: frame %d at %d has %d bytes, want 1..%d", p.name, i, off, size, batchSize)
		}
		if off/segSize != (off+size-1)/segSize {
			t.Fatalf("%s: frame [%d, %d) crosses a segment end", p.name, off, off+size)
		}
		if i > 0 && frames[i-1][0]+frames[i-1][1] != off {
			t.Fatalf("%s: frame %d at %d does not follow [%d, %d)", p.name, i, off, frames[i-1][0], frames[i-1][0]+frames[i-1][1])
		}
	}
	return frames[0][0]
}

// waitAck waits until the master has a slave whose ack is want.
func waitAck(t *testing.T, m *core.Master, want int64) core.SlaveInfo {
	t.Helper()
	var got core.SlaveInfo
	eventually(t, fmt.Sprintf("a slave acking %d", want), func() error {
		st := m.Status()
		for _, s := range st.Slaves {
			if s.AckOffset == want {
				got = s
				return nil
			}
		}
		return fmt.Errorf("slaves %+v", st.Slaves)
	})
	return got
}

// testJavaSlaveOfGoMaster: replicator's master (core over real TCP) feeds
// the independent Java slave, which reads the socket in random pieces of
// 1..3000 bytes. It checks the 4.x start rule (an empty slave's request 0
// starts at max - max % segment size, the last segment's start), frames
// (<= 32 KiB, contiguous, never across a segment end), appends continuing
// during catch-up, the Java slave's acks reaching the master, heartbeats
// [max][0] on an idle link, a restarted slave resuming exactly at its max
// offset, and the Java slave's files byte-identical to the master's.
func testJavaSlaveOfGoMaster(t *testing.T, classes string) {
	mdir := t.TempDir()
	lg := openLog(t, mdir)
	m := startGoMaster(t, lg, core.MasterConfig{HeartbeatInterval: 200 * time.Millisecond})
	putMessages(t, m, 0, 300)
	b := lg.Bounds()
	start := b.Max - b.Max%segSize // RocketMQ 4.x: the start of the last segment
	if start != b.LastSegmentStart || start < 2*segSize {
		t.Fatalf("setup: want a log of several segments ending inside one: %+v", b)
	}

	sdir := t.TempDir()
	js := startJava(t, classes, "java-slave", "HaSlave", m.Addr(), sdir, strconv.Itoa(segSize), "--split", "7")
	eventually(t, "the master's writer picks the start offset", func() error {
		st := m.Status()
		if len(st.Slaves) != 1 || st.Slaves[0].RequestOffset != 0 || st.Slaves[0].NextTransfer < start {
			return fmt.Errorf("slaves %+v", st.Slaves)
		}
		return nil
	})
	putMessages(t, m, 300, 300) // appends during catch-up, across segment ends
	max := lg.Bounds().Max
	info := waitAck(t, m, max)
	if info.RequestOffset != 0 {
		t.Errorf("master saw request offset %d, want 0", info.RequestOffset)
	}
	if first := checkFrames(t, js); first != start {
		t.Errorf("first frame at %d, want %d (max %d rounded down to a segment start)", first, start, b.Max)
	}
	if err := sameLog(sdir, filepath.Join(mdir, "commitlog"), segSize, start, max); err != nil {
		t.Fatal(err)
	}
	// Idle: the master heartbeats [max][0]; the Java slave checks the offset.
	js.waitLine(fmt.Sprintf(`^heartbeat %d$`, max))
	js.noErrors()

	// Restart: the slave reports its max offset and the master resumes there.
	js.kill()
	putMessages(t, m, 600, 150)
	max2 := lg.Bounds().Max
	js2 := startJava(t, classes, "java-slave-2", "HaSlave", m.Addr(), sdir, strconv.Itoa(segSize))
	js2.waitLine(fmt.Sprintf(`^report %d$`, max))
	waitAck(t, m, max2)
	if first := checkFrames(t, js2); first != max {
		t.Errorf("after restart: first frame at %d, want the slave's max offset %d", first, max)
	}
	if err := sameLog(sdir, filepath.Join(mdir, "commitlog"), segSize, start, max2); err != nil {
		t.Fatal(err)
	}
	js2.noErrors()
}

// testJavaSlaveOfGoMasterFromFirstSegment: with StartFromFirstSegment (as
// RocketMQ 5.x's full sync) an empty Java slave receives the whole log,
// byte-identical from offset 0. The slave sends its first report only after
// 500 ms, as RocketMQ 4.x delays it (5 s): the master, whose heartbeat
// interval is shorter, must send nothing, not even a heartbeat, before it.
func testJavaSlaveOfGoMasterFromFirstSegment(t *testing.T, classes string) {
	mdir := t.TempDir()
	lg := openLog(t, mdir)
	m := startGoMaster(t, lg, core.MasterConfig{StartFromFirstSegment: true, HeartbeatInterval: 50 * time.Millisecond})
	putMessages(t, m, 0, 400)
	max := lg.Bounds().Max
	sdir := t.TempDir()
	js := startJava(t, classes, "java-slave", "HaSlave", m.Addr(), sdir, strconv.Itoa(segSize), "--first-report-ms", "500")
	waitAck(t, m, max)
	if first := checkFrames(t, js); first != 0 {
		t.Errorf("first frame at %d, want 0", first)
	}
	if err := sameLog(sdir, filepath.Join(mdir, "commitlog"), segSize, 0, max); err != nil {
		t.Fatal(err)
	}
	js.noErrors()
}

// javaMaster is a running HaMaster.
type javaMaster struct {
	*proc
	dir  string
	addr string
}

func startJavaMaster(t *testing.T, classes string, extra ...string) *javaMaster {
	t.Helper()
	dir := t.TempDir()
	p := startJava(t, classes, "java-master", "HaMaster", append([]string{"0", dir, strconv.Itoa(segSize)}, extra...)...)
	port := p.waitLine(`^listening (\d+)$`)[1]
	return &javaMaster{proc: p, dir: dir, addr: "127.0.0.1:" + port}
}

// appendMessages makes the Java master append n records with bodies of at
// most maxBody bytes and returns its new max offset.
func (jm *javaMaster) appendMessages(n, maxBody int) int64 {
	jm.t.Helper()
	before := len(jm.events("appended"))
	jm.send(fmt.Sprintf("append %d %d", n, maxBody))
	var max int64
	eventually(jm.t, "java master appends", func() error {
		ev := jm.events("appended")
		if len(ev) <= before {
			return errors.New("not yet")
		}
		max = ev[before][0]
		return nil
	})
	return max
}

// checkJavaRecords decodes the records of lg from offset `from` to its end
// and checks them against HaMaster's generator: record n has topic
// TopicTest, queue n % 4, key "k<n>", body length 1 + n*7919 % maxBody and
// body byte i = n*131 + i*7. It returns the number of records.
func checkJavaRecords(t *testing.T, lg *commitlog.Log, from int64, maxBody int) int {
	t.Helper()
	count := 0
	off := from
	max := lg.Bounds().Max
	for off < max {
		recs, next, err := lg.ReadMessages(off, 64)
		if err != nil {
			t.Fatalf("decoding the Java master's records at %d: %v", off, err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			n, err := strconv.Atoi(r.Properties["KEYS"][1:])
			if r.Properties["KEYS"] == "" || err != nil {
				t.Fatalf("record at %d: properties %q", r.PhysicalOffset, r.Properties)
			}
			if r.Topic != "TopicTest" || r.QueueID != int32(n%4) || len(r.Body) != 1+n*7919%maxBody {
				t.Fatalf("record k%d at %d: topic %q queue %d body %d bytes", n, r.PhysicalOffset, r.Topic, r.QueueID, len(r.Body))
			}
			for i, c := range r.Body {
				if c != byte(n*131+i*7) {
					t.Fatalf("record k%d at %d: body byte %d is %d", n, r.PhysicalOffset, i, c)
				}
			}
			count++
		}
		off = next
	}
	if off != max {
		t.Fatalf("records end at %d, log max offset %d", off, max)
	}
	return count
}

// testGoSlaveOfJavaMaster: the independent Java master, writing RocketMQ
// records and fillers into full-size segment files and sending each frame
// in random pieces, feeds replicator's slave (core.SlaveNode on the
// commit-log store). It checks that the Go slave reports 0 at once (its
// report interval is set to an hour, so no timer report can start the
// transfer), that it starts at the Java master's last segment and becomes
// byte-identical to the Java master's files (fillers and zero padding
// included) while appends continue, that its acks reach the master, that
// heartbeats keep the link up without a reconnect, that the Java-encoded
// records decode and survive the store's recovery scan, and that a
// restarted slave resumes at its max offset.
func testGoSlaveOfJavaMaster(t *testing.T, classes string) {
	const maxBody = 6000
	jm := startJavaMaster(t, classes, "--heartbeat-ms", "200", "--split", "11")
	max1 := jm.appendMessages(200, maxBody)
	start := max1 - max1%segSize
	if start < 2*segSize {
		t.Fatalf("setup: Java log of %d bytes spans too few segments", max1)
	}

	sdir := t.TempDir()
	lg := openLog(t, sdir)
	cfg := core.SlaveConfig{MasterAddr: jm.addr, ReportInterval: time.Hour, ReconnectDelay: 100 * time.Millisecond}
	s, err := core.NewSlave(lg, tcptransport.New(tcptransport.DefaultOptions()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	jm.waitLine(fmt.Sprintf(`^start %d 0$`, start))
	max2 := jm.appendMessages(250, maxBody) // appends during catch-up
	eventually(t, "Go slave catches up", func() error {
		if b := lg.Bounds(); b.Max != max2 {
			return fmt.Errorf("slave at %d, Java master at %d", b.Max, max2)
		}
		return nil
	})
	jm.waitLine(fmt.Sprintf(`^report %d$`, max2)) // the ack reached the master
	if reps := jm.events("report"); reps[0][0] != 0 {
		t.Errorf("first report %d, want 0 (empty slave)", reps[0][0])
	}
	if b := lg.Bounds(); b.Min != start {
		t.Errorf("Go slave's log starts at %d, want the Java master's last segment %d", b.Min, start)
	}
	if err := sameLog(filepath.Join(sdir, "commitlog"), jm.dir, segSize, start, max2); err != nil {
		t.Fatal(err)
	}
	// Idle link: two heartbeats [max][0] go out and the slave stays connected.
	hb := fmt.Sprintf("%d", max2)
	eventually(t, "two heartbeats", func() error {
		n := 0
		for _, e := range jm.events("heartbeat") {
			if strconv.FormatInt(e[0], 10) == hb {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d heartbeats at %s", n, hb)
		}
		return nil
	})
	if st := s.Status(); !st.Connected || st.Reconnects != 0 || st.LastError != "" || st.SegmentError != "" {
		t.Errorf("slave status after heartbeats: %+v", st)
	}
	if n := jm.count("accepted"); n != 1 {
		t.Errorf("Java master accepted %d connections, want 1", n)
	}
	n := checkJavaRecords(t, lg, start, maxBody)

	// Restart the slave on the same store (recovery scans the Java records)
	// while the master keeps appending: it resumes at its max offset.
	s.Close()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	max3 := jm.appendMessages(150, maxBody)
	lg2 := openLog(t, sdir)
	if b := lg2.Bounds(); b.Max != max2 || b.Min != start {
		t.Fatalf("reopened slave log: %+v, want [%d, %d)", b, start, max2)
	}
	s2, err := core.NewSlave(lg2, tcptransport.New(tcptransport.DefaultOptions()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	jm.waitLine(fmt.Sprintf(`^start %d %d$`, max2, max2))
	eventually(t, "restarted Go slave catches up", func() error {
		if b := lg2.Bounds(); b.Max != max3 {
			return fmt.Errorf("slave at %d, Java master at %d", b.Max, max3)
		}
		return nil
	})
	if err := sameLog(filepath.Join(sdir, "commitlog"), jm.dir, segSize, start, max3); err != nil {
		t.Fatal(err)
	}
	if n2 := checkJavaRecords(t, lg2, start, maxBody); n2 <= n {
		t.Errorf("%d records after the restart, %d before", n2, n)
	}
	jm.noErrors()
}

// testStartRuleAtSegmentEnd checks RocketMQ 4.x's start rule where "the
// start of the last segment" and RocketMQ's formula max - max % segment size
// differ: a master whose log ends exactly at a segment end (a promoted slave
// that stopped right after a segment's filler). RocketMQ starts an empty
// slave at max (nothing is sent until new data arrives), and so must core.
func testStartRuleAtSegmentEnd(t *testing.T, classes string) {
	// A master log, then a replica of it cut at a segment end.
	src := openLog(t, t.TempDir())
	m0 := startGoMaster(t, src, core.MasterConfig{})
	putMessages(t, m0, 0, 300)
	m0.Close()
	end := src.Bounds().LastSegmentStart
	mdir := t.TempDir()
	lg := openLog(t, mdir)
	for off := int64(0); off < end; {
		v, err := src.Read(off, batchSize)
		if err != nil {
			t.Fatal(err)
		}
		_, err = lg.AppendAt(off, v.Data)
		off += int64(len(v.Data))
		v.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	b := lg.Bounds()
	if b.Max != end || b.Max%segSize != 0 {
		t.Fatalf("setup: log %+v does not end at a segment end", b)
	}

	// The promoted node serves it; an empty Java slave asks for 0.
	m := startGoMaster(t, lg, core.MasterConfig{HeartbeatInterval: 100 * time.Millisecond})
	js := startJava(t, classes, "java-slave", "HaSlave", m.Addr(), t.TempDir(), strconv.Itoa(segSize))
	js.waitLine(`^(frame|heartbeat) `)
	putMessages(t, m, 300, 1)
	waitAck(t, m, lg.Bounds().Max)
	if first := checkFrames(t, js); first != b.Max {
		t.Errorf("request 0 on a log ending at the segment end %d: first frame at %d; RocketMQ 4.x starts at max - max %% segment size = %d", b.Max, first, b.Max)
	}
}

// testSyncMasterWithJavaSlave: a SYNC_MASTER releases each put when the
// Java slave's ack covers it (PUT_OK, never FLUSH_SLAVE_TIMEOUT), and answers
// SLAVE_NOT_AVAILABLE once the slave is gone: the Java slave's reports after
// each applied read are acks core understands.
func testSyncMasterWithJavaSlave(t *testing.T, classes string) {
	lg := openLog(t, t.TempDir())
	m := startGoMaster(t, lg, core.MasterConfig{Role: core.SyncMaster})
	js := startJava(t, classes, "java-slave", "HaSlave", m.Addr(), t.TempDir(), strconv.Itoa(segSize))
	if err := m.WaitSlaves(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	js.waitLine(`^report 0$`)
	putMessages(t, m, 0, 100) // fails unless every put is PUT_OK
	waitAck(t, m, lg.Bounds().Max)
	js.noErrors()
	js.kill()
	eventually(t, "the master notices the slave left", func() error {
		if n := len(m.Status().Slaves); n != 0 {
			return fmt.Errorf("%d slaves", n)
		}
		return nil
	})
	res, err := m.Put(context.Background(), &record.Message{Topic: "TopicTest", Body: []byte("x")})
	if err != nil || res.Status != core.SlaveNotAvailable {
		t.Fatalf("put without a slave: %v %v, want SLAVE_NOT_AVAILABLE", res.Status, err)
	}
}
