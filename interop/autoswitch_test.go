package interop

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// TestAutoSwitchJavaPeers compiles the Java peers of RocketMQ 5's
// controller-mode ("AutoSwitch") HA protocol and runs them against each
// other, so that the peers themselves are proven before replicator is
// measured against them (TestAutoSwitchInterop).
func TestAutoSwitchJavaPeers(t *testing.T) {
	classes := javaClasses(t)
	t.Run("FullHistoryAcrossEpochs", func(t *testing.T) { testJavaASFullHistory(t, classes) })
	t.Run("SyncFromLastFile", func(t *testing.T) { testJavaASSyncFromLastFile(t, classes) })
	t.Run("SlaveTruncatesDivergentTail", func(t *testing.T) { testJavaASTruncation(t, classes) })
	t.Run("NoConsistentPoint", func(t *testing.T) { testJavaASNoConsistentPoint(t, classes) })
}

// asLog is a commit log of records appended through the store API, closed
// so that a Java master can serve its files.
type asLog struct {
	dir     string  // the segment files
	offsets []int64 // record start offsets, then the max offset
}

func (l asLog) max() int64 { return l.offsets[len(l.offsets)-1] }

// appendASRecords appends records [from, from+n) to lg, as putMessages does
// through a master, and returns their start offsets followed by the end.
func appendASRecords(t *testing.T, lg *commitlog.Log, from, n int) []int64 {
	t.Helper()
	var offs []int64
	for k := from; k < from+n; k++ {
		res, err := lg.Append(context.Background(), asMessage(k))
		if err != nil {
			t.Fatalf("append %d: %v", k, err)
		}
		offs = append(offs, res.Offset)
	}
	return append(offs, lg.Bounds().Max)
}

// asMessage is putMessages's message k.
func asMessage(k int) *record.Message {
	body := make([]byte, 1+k*4099%8192)
	for i := range body {
		body[i] = byte(k + i*13)
	}
	return &record.Message{Topic: "TopicTest", QueueID: int32(k % 4), Body: body, Properties: map[string]string{"KEYS": "k" + strconv.Itoa(k)}}
}

// buildASLog writes n records into a fresh commit log and closes it.
func buildASLog(t *testing.T, n int) asLog {
	t.Helper()
	dir := t.TempDir()
	lg := openLog(t, dir)
	offs := appendASRecords(t, lg, 0, n)
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	return asLog{dir: filepath.Join(dir, "commitlog"), offsets: offs}
}

// asEpoch is one epoch entry as the Java peers take it on the command line.
type asEpoch struct {
	epoch int32
	start int64
}

func epochArg(es []asEpoch) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%d:%d", e.epoch, e.start))
	}
	return strings.Join(parts, ",")
}

// epochAt returns the epoch of es holding off.
func epochAt(es []asEpoch, off int64) asEpoch {
	var cur asEpoch
	for _, e := range es {
		if e.start <= off {
			cur = e
		}
	}
	return cur
}

// epochEnd is the end of epoch e in es (-1: the last, unbounded).
func epochEnd(es []asEpoch, e asEpoch) int64 {
	for i, x := range es {
		if x == e && i+1 < len(es) {
			return es[i+1].start
		}
	}
	return -1
}

// asJavaMaster is a running AutoSwitchMaster.
type asJavaMaster struct {
	*proc
	addr   string
	epochs []asEpoch
}

func startASJavaMaster(t *testing.T, classes string, l asLog, es []asEpoch, max int64, extra ...string) *asJavaMaster {
	t.Helper()
	args := append([]string{"0", l.dir, strconv.Itoa(segSize), "--epochs", epochArg(es), "--max", strconv.FormatInt(max, 10)}, extra...)
	p := startJava(t, classes, "java-as-master", "AutoSwitchMaster", args...)
	port := p.waitLine(`^listening (\d+)$`)[1]
	return &asJavaMaster{proc: p, addr: "127.0.0.1:" + port, epochs: es}
}

// grow makes the Java master serve its files up to max.
func (jm *asJavaMaster) grow(max int64) {
	jm.t.Helper()
	jm.send(fmt.Sprintf("grow %d", max))
	jm.waitLine(fmt.Sprintf(`^grown %d$`, max))
}

// checkASFrames checks the "frame OFFSET SIZE EPOCH ..." lines of an
// AutoSwitch Java peer: bodies of 1..batchSize bytes, contiguous, none
// across a segment end or an epoch end, each labelled with the epoch that
// holds it. It returns the first frame's offset.
func checkASFrames(t *testing.T, p *proc, es []asEpoch) int64 {
	t.Helper()
	p.waitLine(`^frame `)
	frames := p.events("frame")
	for i, f := range frames {
		off, size, ep := f[0], f[1], f[2]
		if size < 1 || size > batchSize {
			t.Fatalf("%s: frame %d at %d has %d bytes, want 1..%d", p.name, i, off, size, batchSize)
		}
		if off/segSize != (off+size-1)/segSize {
			t.Fatalf("%s: frame [%d, %d) crosses a segment end", p.name, off, off+size)
		}
		if i > 0 && frames[i-1][0]+frames[i-1][1] != off {
			t.Fatalf("%s: frame %d at %d does not follow [%d, %d)", p.name, i, off, frames[i-1][0], frames[i-1][0]+frames[i-1][1])
		}
		e := epochAt(es, off)
		if int64(e.epoch) != ep {
			t.Fatalf("%s: frame at %d carries epoch %d, want %d", p.name, off, ep, e.epoch)
		}
		if end := epochEnd(es, e); end >= 0 && off+size > end {
			t.Fatalf("%s: frame [%d, %d) crosses the end %d of epoch %d", p.name, off, off+size, end, e.epoch)
		}
	}
	return frames[0][0]
}

// readASEpochFile decodes an epochFileCheckpoint with replicator's decoder
// (core/epoch): the Java slave's file must be RocketMQ's exact format.
func readASEpochFile(t *testing.T, dir string) []asEpoch {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, epoch.FileName))
	if err != nil {
		t.Fatal(err)
	}
	es, err := epoch.Decode(b)
	if err != nil {
		t.Fatalf("epoch file %q: %v", b, err)
	}
	var out []asEpoch
	for _, e := range es {
		out = append(out, asEpoch{e.Epoch, e.StartOffset})
	}
	return out
}

// threeEpochs splits l's records into epochs 1, 2 and 5 (a master history
// with a gap, as controllers produce when an elected master never wrote).
func threeEpochs(l asLog) []asEpoch {
	n := len(l.offsets) - 1
	return []asEpoch{{1, 0}, {2, l.offsets[n/3]}, {5, l.offsets[2*n/3]}}
}

// testJavaASFullHistory: an empty AutoSwitchSlave with an empty epoch list
// (a new replica) gets the Java master's whole log from offset 0 (ack 0 and
// no syncFromLastFile: the master's minimum offset), across three epochs
// and while the master's log grows; it learns the epochs from the frames
// and writes them in RocketMQ's epoch file format.
func testJavaASFullHistory(t *testing.T, classes string) {
	l := buildASLog(t, 600)
	es := threeEpochs(l)
	first := l.offsets[500]
	jm := startASJavaMaster(t, classes, l, es, first, "--heartbeat-ms", "200", "--split", "11")
	sdir := t.TempDir()
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", jm.addr, sdir, strconv.Itoa(segSize),
		"--broker-id", "7", "--report-ms", "200", "--split", "5")
	jm.waitLine(`^handshake 7 0 0$`)
	js.waitLine(fmt.Sprintf(`^master-handshake %d 5 3$`, first))
	js.waitLine(`^keep 0$`)
	jm.waitLine(`^start 0 0 1$`)
	jm.grow(l.max())
	jm.waitLine(fmt.Sprintf(`^ack %d$`, l.max()))
	if got := checkASFrames(t, js, es); got != 0 {
		t.Errorf("first frame at %d, want 0", got)
	}
	if err := sameLog(sdir, l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := readASEpochFile(t, sdir); !slices.Equal(got, es) {
		t.Errorf("slave epochs %v, want %v", got, es)
	}
	js.waitLine(fmt.Sprintf(`^heartbeat %d 5 %d$`, l.max(), l.max()))
	js.noErrors()
	jm.noErrors()
}

// testJavaASSyncFromLastFile: with syncFromLastFile an empty slave starts at
// the master's last segment.
func testJavaASSyncFromLastFile(t *testing.T, classes string) {
	l := buildASLog(t, 300)
	es := threeEpochs(l)
	jm := startASJavaMaster(t, classes, l, es, l.max())
	sdir := t.TempDir()
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", jm.addr, sdir, strconv.Itoa(segSize),
		"--broker-id", "3", "--sync-from-last-file", "--async-learner", "--report-ms", "200")
	jm.waitLine(`^handshake 3 1 1$`)
	last := (l.max() - 1) / segSize * segSize
	jm.waitLine(fmt.Sprintf(`^ack %d$`, l.max()))
	if got := checkASFrames(t, js, es); got != last {
		t.Errorf("first frame at %d, want the last segment's start %d", got, last)
	}
	if err := sameLog(sdir, l.dir, segSize, last, l.max()); err != nil {
		t.Fatal(err)
	}
	js.noErrors()
}

// writeASSlaveFiles lays out a Java slave's directory: src's bytes [0, upto)
// followed by tail, in files holding only the bytes written.
func writeASSlaveFiles(t *testing.T, dir, src string, upto int64, tail []byte) int64 {
	t.Helper()
	var data []byte
	for s := int64(0); s < upto; s += segSize {
		b, err := os.ReadFile(filepath.Join(src, segName(s)))
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b[:min(segSize, upto-s)]...)
	}
	data = append(data, tail...)
	for s := int64(0); s < int64(len(data)); s += segSize {
		if err := os.WriteFile(filepath.Join(dir, segName(s)), data[s:min(int64(len(data)), s+segSize)], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return int64(len(data))
}

// asDivergentTail is n bytes that are not the master's.
func asDivergentTail(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// testJavaASTruncation: the Java slave was master of epoch 3 and wrote a
// tail the new master never saw; the master's history is 1, 2, 5. The
// consistent point is the end of the slave's epoch 2 (its epoch 3 start):
// the slave cuts its tail there, drops epoch 3, then receives the rest of
// epoch 2 and epoch 5, ending byte-identical with epochs 1, 2, 5.
func testJavaASTruncation(t *testing.T, classes string) {
	l := buildASLog(t, 600)
	es := threeEpochs(l)
	cut := l.offsets[300] // inside the master's epoch 2
	sdir := t.TempDir()
	end := writeASSlaveFiles(t, sdir, l.dir, cut, asDivergentTail(300<<10))
	slaveEpochs := []asEpoch{{1, 0}, es[1], {3, cut}}
	jm := startASJavaMaster(t, classes, l, es, l.max(), "--heartbeat-ms", "200")
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", jm.addr, sdir, strconv.Itoa(segSize),
		"--epochs", epochArg(slaveEpochs), "--report-ms", "200", "--split", "3")
	js.waitLine(fmt.Sprintf(`^truncate %d %d$`, end, cut))
	jm.waitLine(fmt.Sprintf(`^start %d %d 2$`, cut, cut))
	jm.waitLine(fmt.Sprintf(`^ack %d$`, l.max()))
	if got := checkASFrames(t, js, es); got != cut {
		t.Errorf("first frame at %d, want the consistent point %d", got, cut)
	}
	if err := sameLog(sdir, l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := readASEpochFile(t, sdir); !slices.Equal(got, es) {
		t.Errorf("slave epochs %v, want %v", got, es)
	}
	js.noErrors()
}

// testJavaASNoConsistentPoint: a slave whose epochs share nothing with the
// master's refuses to cut or append.
func testJavaASNoConsistentPoint(t *testing.T, classes string) {
	l := buildASLog(t, 100)
	jm := startASJavaMaster(t, classes, l, []asEpoch{{1, 0}, {2, l.offsets[50]}}, l.max())
	sdir := t.TempDir()
	end := writeASSlaveFiles(t, sdir, l.dir, 0, asDivergentTail(1000))
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", jm.addr, sdir, strconv.Itoa(segSize),
		"--epochs", "4:0", "--report-ms", "200")
	js.waitLine(`^error no consistent point`)
	if err := js.wait(); err == nil {
		t.Fatal("slave exited 0")
	}
	if fi, err := os.Stat(filepath.Join(sdir, segName(0))); err != nil || fi.Size() != end {
		t.Fatalf("slave log changed: %v %v", fi, err)
	}
	if n := len(jm.events("frame")); n != 0 {
		t.Fatalf("master sent %d frames", n)
	}
}

// TestAutoSwitchInterop replicates both ways between replicator's
// autoswitch protocol (core.Replica over real TCP) and the Java peers:
// replicator master -> Java slave, Java master -> replicator slave, and a
// replicator slave that must cut a divergent tail before it follows the Java
// master.
func TestAutoSwitchInterop(t *testing.T) {
	classes := javaClasses(t)
	t.Run("GoMasterToJavaSlave", func(t *testing.T) { testASGoMasterToJavaSlave(t, classes) })
	t.Run("GoMasterToJavaSlaveSyncFromLastFile", func(t *testing.T) { testASGoMasterSyncFromLastFile(t, classes) })
	t.Run("JavaSlaveTruncatesAgainstGoMaster", func(t *testing.T) { testASJavaSlaveTruncatesAgainstGoMaster(t, classes) })
	t.Run("SyncMasterWaitsForJavaSlave", func(t *testing.T) { testASSyncMasterWithJavaSlave(t, classes) })
	t.Run("JavaMasterToGoSlave", func(t *testing.T) { testASJavaMasterToGoSlave(t, classes) })
	t.Run("GoSlaveTruncatesDivergentTail", func(t *testing.T) { testASGoSlaveTruncation(t, classes) })
	t.Run("GoSlaveLongerThanMaster", func(t *testing.T) { testASGoSlaveLongerThanMaster(t, classes) })
	t.Run("GoSlaveNoConsistentPoint", func(t *testing.T) { testASGoSlaveNoConsistentPoint(t, classes) })
	t.Run("GoSlaveDropsBadStateFrame", func(t *testing.T) { testASGoSlaveBadState(t, classes) })
	t.Run("DaemonMasterToJavaSlave", func(t *testing.T) { testASDaemonMasterToJavaSlave(t, classes) })
	t.Run("JavaMasterToDaemonSlave", func(t *testing.T) { testASJavaMasterToDaemonSlave(t, classes) })
}

// newASReplica opens a core.Replica on lg and dir's epoch file, with a fixed
// HA listen address (a role change reopens the same one).
func newASReplica(t *testing.T, lg *commitlog.Log, dir string, brokerID int64, reg prometheus.Registerer) (*core.Replica, *epoch.File) {
	t.Helper()
	return newASReplicaLogger(t, lg, dir, brokerID, reg, nil)
}

// newASReplicaLogger is newASReplica with a logger.
func newASReplicaLogger(t *testing.T, lg *commitlog.Log, dir string, brokerID int64, reg prometheus.Registerer, logger hclog.Logger) (*core.Replica, *epoch.File) {
	t.Helper()
	ef, err := epoch.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := core.NewReplica(core.ReplicaConfig{
		Store: lg, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: ef, BrokerID: brokerID,
		Master:     core.MasterConfig{ListenAddr: freeAddrs(t, 1)[0], HeartbeatInterval: 200 * time.Millisecond},
		Slave:      core.SlaveConfig{ReportInterval: 200 * time.Millisecond, ReconnectDelay: 100 * time.Millisecond},
		Registerer: reg,
		Logger:     logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, ef
}

// putASReplica puts messages [from, from+n) and returns their offsets
// followed by the end of the last one.
func putASReplica(t *testing.T, r *core.Replica, from, n int) []int64 {
	t.Helper()
	var offs []int64
	for k := from; k < from+n; k++ {
		res, err := r.Put(context.Background(), asMessage(k))
		if err != nil || res.Status != core.PutOK {
			t.Fatalf("put %d: %v %v", k, res.Status, err)
		}
		offs = append(offs, res.Offset)
		if k == from+n-1 {
			offs = append(offs, res.NextOffset)
		}
	}
	return offs
}

// twoEpochMaster is a replicator master whose history is epoch 1 (messages
// 0..199) then epoch 3 (200..399): promoted twice, with a gap of epochs as a
// controller produces.
func twoEpochMaster(t *testing.T) (r *core.Replica, lg *commitlog.Log, dir string, es []asEpoch, offs []int64) {
	t.Helper()
	dir = t.TempDir()
	lg = openLog(t, dir)
	r, ef := newASReplica(t, lg, dir, 0, nil)
	if ep, err := r.BecomeMaster(0); err != nil || ep != 1 {
		t.Fatalf("become master: %d %v", ep, err)
	}
	offs = putASReplica(t, r, 0, 200)
	if ep, err := r.BecomeMaster(3); err != nil || ep != 3 {
		t.Fatalf("become master of epoch 3: %d %v", ep, err)
	}
	offs = append(offs[:200], putASReplica(t, r, 200, 200)...)
	es = asEntries(ef)
	if want := []asEpoch{{1, 0}, {3, offs[200]}}; !slices.Equal(es, want) {
		t.Fatalf("master epochs %v, want %v", es, want)
	}
	return r, lg, filepath.Join(dir, "commitlog"), es, offs
}

// testASGoMasterSyncFromLastFile: an empty Java slave with the
// syncFromLastFile flag (and asyncLearner) starts at replicator's last
// segment; the master's status shows the learner flag.
func testASGoMasterSyncFromLastFile(t *testing.T, classes string) {
	r, lg, mlog, es, _ := twoEpochMaster(t)
	max := lg.Bounds().Max
	last := lg.Bounds().LastSegmentStart
	if last == 0 || last >= max {
		t.Fatalf("setup: last segment at %d, max %d", last, max)
	}
	sdir := t.TempDir()
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", r.Master().Addr(), sdir, strconv.Itoa(segSize),
		"--broker-id", "8", "--sync-from-last-file", "--async-learner", "--report-ms", "200")
	var info core.SlaveInfo
	eventually(t, "the Java slave's ack of the max offset", func() error {
		for _, s := range r.Master().Status().Slaves {
			if s.AckOffset == max {
				info = s
				return nil
			}
		}
		return fmt.Errorf("slaves %+v", r.Master().Status().Slaves)
	})
	if info.BrokerID != 8 || !info.AsyncLearner || info.InSync {
		t.Errorf("slave info %+v: want broker 8, an async learner, not in sync", info)
	}
	if first := checkASFrames(t, js, es); first != last {
		t.Errorf("first frame at %d, want the last segment's start %d", first, last)
	}
	if err := sameLog(sdir, mlog, segSize, last, max); err != nil {
		t.Fatal(err)
	}
	js.noErrors()
}

// testASSyncMasterWithJavaSlave: a SYNC_MASTER in autoswitch mode adds the
// Java slave to its SyncStateSet once it has caught up, and then every put
// returns PUT_OK only when the Java slave's 12-byte ack covers it; the
// confirm offset in its heartbeats reaches the max offset; when the
// Java slave is gone the set shrinks back to the master and puts succeed
// without it.
func testASSyncMasterWithJavaSlave(t *testing.T, classes string) {
	dir := t.TempDir()
	lg := openLog(t, dir)
	ef, err := epoch.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := core.NewReplica(core.ReplicaConfig{
		Store: lg, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: ef, BrokerID: 1,
		Master: core.MasterConfig{ListenAddr: freeAddrs(t, 1)[0], Role: core.SyncMaster, SlaveTimeout: 10 * time.Second,
			HeartbeatInterval: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := r.BecomeMaster(0); err != nil {
		t.Fatal(err)
	}
	putASReplica(t, r, 0, 20) // only the master is in sync: no wait
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", r.Master().Addr(), t.TempDir(), strconv.Itoa(segSize),
		"--broker-id", "7", "--report-ms", "200")
	eventually(t, "the Java slave joins the SyncStateSet", func() error {
		if st := r.Master().Status(); !slices.Contains(st.SyncStateSet, 7) || len(st.Slaves) != 1 || !st.Slaves[0].InSync {
			return fmt.Errorf("set %v, slaves %+v", st.SyncStateSet, st.Slaves)
		}
		return nil
	})
	for k := 20; k < 120; k++ {
		res, err := r.Put(context.Background(), asMessage(k))
		if err != nil || res.Status != core.PutOK {
			t.Fatalf("put %d: %v %v", k, res.Status, err)
		}
		if st := r.Master().Status(); len(st.Slaves) != 1 || st.Slaves[0].AckOffset < res.NextOffset {
			t.Fatalf("put %d returned PUT_OK before the Java slave acked its end %d: slaves %+v", k, res.NextOffset, st.Slaves)
		}
	}
	// Every in-sync member holds the max offset: that is the confirm offset
	// the master sends (the Java slave prints min(confirm, its max)).
	max := lg.Bounds().Max
	js.waitLine(fmt.Sprintf(`^heartbeat %d 1 %d$`, max, max))
	if c := r.ConfirmOffset(); c != max {
		t.Errorf("master confirm offset %d, want %d", c, max)
	}
	js.noErrors()
	js.kill()
	eventually(t, "the SyncStateSet shrinks to the master", func() error {
		if st := r.Master().Status(); !slices.Equal(st.SyncStateSet, []int64{1}) {
			return fmt.Errorf("set %v", st.SyncStateSet)
		}
		return nil
	})
	putASReplica(t, r, 120, 5)
}

// testASJavaSlaveTruncatesAgainstGoMaster: the Java slave was master of
// epoch 2 and wrote a tail replicator's master never had (its history is 1,
// 3): at the handshake the Java slave finds the consistent point from
// replicator's epoch list, cuts there, and receives the rest.
func testASJavaSlaveTruncatesAgainstGoMaster(t *testing.T, classes string) {
	r, lg, mlog, es, offs := twoEpochMaster(t)
	max := lg.Bounds().Max
	cut := offs[100] // inside the master's epoch 1
	sdir := t.TempDir()
	end := writeASSlaveFiles(t, sdir, mlog, cut, asDivergentTail(400<<10))
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", r.Master().Addr(), sdir, strconv.Itoa(segSize),
		"--epochs", epochArg([]asEpoch{{1, 0}, {2, cut}}), "--report-ms", "200", "--split", "9")
	js.waitLine(fmt.Sprintf(`^truncate %d %d$`, end, cut))
	eventually(t, "the Java slave's ack of the max offset", func() error {
		for _, s := range r.Master().Status().Slaves {
			if s.AckOffset == max {
				return nil
			}
		}
		return fmt.Errorf("slaves %+v", r.Master().Status().Slaves)
	})
	if first := checkASFrames(t, js, es); first != cut {
		t.Errorf("first frame at %d, want the consistent point %d", first, cut)
	}
	if err := sameLog(sdir, mlog, segSize, 0, max); err != nil {
		t.Fatal(err)
	}
	if got := readASEpochFile(t, sdir); !slices.Equal(got, es) {
		t.Errorf("Java slave epochs %v, want the master's %v", got, es)
	}
	js.noErrors()
}

func asEntries(ef *epoch.File) []asEpoch {
	var out []asEpoch
	for _, e := range ef.Entries() {
		out = append(out, asEpoch{e.Epoch, e.StartOffset})
	}
	return out
}

// checkASRecords decodes lg over [0, max) and checks it holds exactly the
// messages of keys, in order.
func checkASRecords(t *testing.T, lg *commitlog.Log, keys []int) {
	t.Helper()
	var got []int
	off, max := lg.Bounds().Min, lg.Bounds().Max
	for off < max {
		recs, next, err := lg.ReadMessages(off, 64)
		if err != nil {
			t.Fatalf("decoding records at %d: %v", off, err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			k, err := strconv.Atoi(strings.TrimPrefix(r.Properties["KEYS"], "k"))
			if err != nil || !bytes.Equal(r.Body, asMessage(k).Body) {
				t.Fatalf("record at %d: key %q, %d body bytes", r.PhysicalOffset, r.Properties["KEYS"], len(r.Body))
			}
			got = append(got, k)
		}
		off = next
	}
	if off != max || !slices.Equal(got, keys) {
		t.Fatalf("records end at %d (max %d); %d records, want %d", off, max, len(got), len(keys))
	}
}

func keyRange(from, to int) []int {
	var out []int
	for k := from; k < to; k++ {
		out = append(out, k)
	}
	return out
}

// asCounter is the value of the counter family name in reg (0 if absent).
func asCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			v := 0.0
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
	}
	return 0
}

// testASGoMasterToJavaSlave: replicator's autoswitch master, with a history
// of two epochs (1, then 3 after a second promotion), feeds an empty Java
// AutoSwitchSlave: the handshake carries both epochs, the slave gets the
// whole log from 0 while puts continue, frames never cross the end of epoch
// 1 or a segment end and carry the right epoch, the slave's epoch file
// matches the master's, its 12-byte acks reach the master (status shows its
// broker id and TRANSFER), heartbeats keep an idle link with the master's
// epoch and a confirm offset.
func testASGoMasterToJavaSlave(t *testing.T, classes string) {
	r, lg, mlog, es, _ := twoEpochMaster(t)
	m := r.Master()
	sdir := t.TempDir()
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", m.Addr(), sdir, strconv.Itoa(segSize),
		"--broker-id", "7", "--report-ms", "200", "--split", "7")
	js.waitLine(fmt.Sprintf(`^master-handshake %d 3 2$`, lg.Bounds().Max))
	js.waitLine(`^master-epoch 1 0$`)
	js.waitLine(fmt.Sprintf(`^master-epoch 3 %d$`, es[1].start))
	putASReplica(t, r, 400, 200) // during catch-up
	max := lg.Bounds().Max
	var info core.SlaveInfo
	eventually(t, "the Java slave's ack of the max offset", func() error {
		for _, s := range r.Master().Status().Slaves {
			if s.AckOffset == max {
				info = s
				return nil
			}
		}
		return fmt.Errorf("slaves %+v", r.Master().Status().Slaves)
	})
	if info.BrokerID != 7 || info.HAState != "TRANSFER" || info.AsyncLearner {
		t.Errorf("slave info %+v: want broker 7 in TRANSFER", info)
	}
	if first := checkASFrames(t, js, es); first != 0 {
		t.Errorf("first frame at %d, want 0 (the master's minimum offset)", first)
	}
	if err := sameLog(sdir, mlog, segSize, 0, max); err != nil {
		t.Fatal(err)
	}
	if got := readASEpochFile(t, sdir); !slices.Equal(got, es) {
		t.Errorf("Java slave epochs %v, want the master's %v", got, es)
	}
	hb := js.waitLine(fmt.Sprintf(`^heartbeat %d 3 (\d+)$`, max))
	if c, _ := strconv.ParseInt(hb[1], 10, 64); c > max {
		t.Errorf("confirm offset %d above the max offset %d", c, max)
	}
	js.noErrors()
}

// testASJavaMasterToGoSlave: the Java AutoSwitchMaster (three epochs,
// frames split into random pieces) feeds an empty replicator slave: it
// handshakes with its broker id and receives the whole log from 0 while the
// master's log grows; the master then starts epoch 7 on the live
// connection (the same broker elected again: no new handshake) and the
// slave learns it from the frames. It ends byte-identical with the
// master's epochs in its epoch file, decodes every record, follows the
// master's confirm offset, stays connected through heartbeats, and after a
// restart resumes at its max offset with nothing cut.
func testASJavaMasterToGoSlave(t *testing.T, classes string) {
	l := buildASLog(t, 600)
	es := threeEpochs(l)
	jm := startASJavaMaster(t, classes, l, es, l.offsets[450], "--heartbeat-ms", "200", "--split", "11")
	sdir := t.TempDir()
	lg := openLog(t, sdir)
	r, ef := newASReplica(t, lg, sdir, 9, nil)
	if err := r.BecomeSlave(jm.addr); err != nil {
		t.Fatal(err)
	}
	jm.waitLine(`^handshake 9 0 0$`)
	jm.waitLine(`^start 0 0 1$`)
	jm.grow(l.offsets[500]) // during catch-up
	waitASSlaveMax(t, lg, l.offsets[500])
	jm.send("epoch 7")
	jm.waitLine(fmt.Sprintf(`^epoch 7 %d$`, l.offsets[500]))
	es = append(es, asEpoch{7, l.offsets[500]})
	jm.grow(l.max())
	waitASSlaveMax(t, lg, l.max())
	jm.waitLine(fmt.Sprintf(`^ack %d$`, l.max()))
	if err := sameLog(filepath.Join(sdir, "commitlog"), l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := asEntries(ef); !slices.Equal(got, es) {
		t.Errorf("Go slave epochs %v, want the master's %v", got, es)
	}
	checkASRecords(t, lg, keyRange(0, 600))
	eventually(t, "confirm offset", func() error {
		if c := r.ConfirmOffset(); c != l.max() {
			return fmt.Errorf("confirm offset %d, want %d", c, l.max())
		}
		return nil
	})
	hb := fmt.Sprintf("heartbeat %d 7", l.max())
	eventually(t, "two heartbeats", func() error {
		if n := jm.count(hb); n < 2 {
			return fmt.Errorf("%d heartbeats", n)
		}
		return nil
	})
	st := r.Status()
	if st.Slave == nil || !st.Slave.Connected || st.Slave.Reconnects != 0 || st.Slave.LastError != "" || st.Slave.HAState != "TRANSFER" {
		t.Errorf("slave status %+v", st.Slave)
	}
	if n := jm.count("accepted"); n != 1 {
		t.Errorf("Java master accepted %d connections, want 1", n)
	}

	// A restarted slave with the same history: the consistent point is its
	// max offset, nothing is cut, the master resumes exactly there.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	lg2 := openLog(t, sdir)
	reg := prometheus.NewRegistry()
	r2, ef2 := newASReplica(t, lg2, sdir, 9, reg)
	if got := asEntries(ef2); !slices.Equal(got, es) {
		t.Fatalf("reopened epoch file %v, want %v", got, es)
	}
	if err := r2.BecomeSlave(jm.addr); err != nil {
		t.Fatal(err)
	}
	jm.waitLine(fmt.Sprintf(`^start %d %d 7$`, l.max(), l.max()))
	eventually(t, "the restarted slave in TRANSFER", func() error {
		if st := r2.Status(); st.Slave == nil || st.Slave.HAState != "TRANSFER" {
			return fmt.Errorf("slave status %+v", st.Slave)
		}
		return nil
	})
	if got := asCounter(t, reg, "replicator_ha_truncated_bytes_total"); got != 0 {
		t.Errorf("restart cut %v bytes", got)
	}
	if b := lg2.Bounds(); b.Max != l.max() {
		t.Errorf("restarted slave at %d, want %d", b.Max, l.max())
	}
	jm.noErrors()
}

// waitASSlaveMax waits until lg's max offset is max.
func waitASSlaveMax(t *testing.T, lg *commitlog.Log, max int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("the Go slave at %d", max), func() error {
		if b := lg.Bounds(); b.Max != max {
			return fmt.Errorf("slave at %d", b.Max)
		}
		return nil
	})
}

// seedASReplicaLog writes src's bytes [0, upto) into lg (a replica's appends)
// and then the divergent messages [from, from+n) as a master would write
// them; it returns the new max offset.
func seedASReplicaLog(t *testing.T, lg *commitlog.Log, src string, upto int64, from, n int) int64 {
	t.Helper()
	for s := int64(0); s < upto; s += segSize {
		b, err := os.ReadFile(filepath.Join(src, segName(s)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lg.AppendAt(s, b[:min(segSize, upto-s)]); err != nil {
			t.Fatal(err)
		}
	}
	offs := appendASRecords(t, lg, from, n)
	if offs[0] != upto {
		t.Fatalf("divergent records start at %d, want %d", offs[0], upto)
	}
	return offs[len(offs)-1]
}

// testASGoSlaveTruncation: the divergence scenario against the
// Java master. The replicator node was master of epoch 3 and wrote 80
// messages the Java master never saw; the Java master's history is 1, 2, 5.
// The consistent point is the start of the slave's epoch 3: the slave cuts
// its tail there (log, epoch file, truncation metric and status), then
// receives the rest of epoch 2 and epoch 5 and ends byte-identical, with the
// master's epochs and only the master's records.
func testASGoSlaveTruncation(t *testing.T, classes string) {
	l := buildASLog(t, 600)
	es := threeEpochs(l)
	cut := l.offsets[300]
	sdir := t.TempDir()
	lg := openLog(t, sdir)
	end := seedASReplicaLog(t, lg, l.dir, cut, 1000, 80)
	if end <= es[2].start {
		t.Fatalf("setup: the divergent tail ends at %d, before the master's epoch 5 at %d", end, es[2].start)
	}
	reg := prometheus.NewRegistry()
	r, ef := newASReplica(t, lg, sdir, 4, reg)
	for _, e := range []asEpoch{{1, 0}, es[1], {3, cut}} {
		if err := ef.Append(e.epoch, e.start); err != nil {
			t.Fatal(err)
		}
	}
	// Frames up to a whole segment (256 KiB) instead of 32 KiB.
	jm := startASJavaMaster(t, classes, l, es, l.max(), "--heartbeat-ms", "200", "--batch", strconv.Itoa(1<<20))
	if err := r.BecomeSlave(jm.addr); err != nil {
		t.Fatal(err)
	}
	jm.waitLine(fmt.Sprintf(`^start %d %d 2$`, cut, cut))
	eventually(t, "the Go slave catches up", func() error {
		if b := lg.Bounds(); b.Max != l.max() {
			return fmt.Errorf("slave at %d, Java master at %d", b.Max, l.max())
		}
		return nil
	})
	if err := sameLog(filepath.Join(sdir, "commitlog"), l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := asEntries(ef); !slices.Equal(got, es) {
		t.Errorf("Go slave epochs %v, want the master's %v", got, es)
	}
	checkASRecords(t, lg, keyRange(0, 600))
	if got := asCounter(t, reg, "replicator_ha_truncated_bytes_total"); got != float64(end-cut) {
		t.Errorf("replicator_ha_truncated_bytes_total %v, want %d", got, end-cut)
	}
	st := r.Status()
	if st.Slave == nil || st.Slave.Truncated == nil || st.Slave.Truncated.From != end || st.Slave.Truncated.To != cut ||
		st.Slave.Truncated.Bytes != end-cut || st.Slave.Truncated.Records != 80 {
		t.Errorf("slave status truncation %+v, want %d -> %d, 80 records", st.Slave, end, cut)
	}
	jm.noErrors()
}

// testASGoSlaveLongerThanMaster: the old master's log is longer than the
// new master's. The replicator node was master of epoch 1 and kept writing
// after the Java master (which had replicated it up to A) took epoch 2 at A;
// its log ends past the Java master's max offset. The consistent point is A
// (the end of the master's epoch 1): everything after it is cut, then the
// slave follows the master's epoch 2.
func testASGoSlaveLongerThanMaster(t *testing.T, classes string) {
	l := buildASLog(t, 400)
	a := l.offsets[300]
	es := []asEpoch{{1, 0}, {2, a}}
	sdir := t.TempDir()
	lg := openLog(t, sdir)
	end := seedASReplicaLog(t, lg, l.dir, a, 2000, 150)
	if end <= l.max() {
		t.Fatalf("setup: the old master's log ends at %d, not past the new master's %d", end, l.max())
	}
	reg := prometheus.NewRegistry()
	r, ef := newASReplica(t, lg, sdir, 6, reg)
	if err := ef.Append(1, 0); err != nil {
		t.Fatal(err)
	}
	jm := startASJavaMaster(t, classes, l, es, l.max(), "--heartbeat-ms", "200")
	if err := r.BecomeSlave(jm.addr); err != nil {
		t.Fatal(err)
	}
	jm.waitLine(fmt.Sprintf(`^start %d %d 2$`, a, a)) // a starts epoch 2
	waitASSlaveMax(t, lg, l.max())
	if err := sameLog(filepath.Join(sdir, "commitlog"), l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := asEntries(ef); !slices.Equal(got, es) {
		t.Errorf("Go slave epochs %v, want the master's %v", got, es)
	}
	checkASRecords(t, lg, keyRange(0, 400))
	if got := asCounter(t, reg, "replicator_ha_truncated_bytes_total"); got != float64(end-a) {
		t.Errorf("replicator_ha_truncated_bytes_total %v, want %d", got, end-a)
	}
	jm.noErrors()
}

// testASGoSlaveNoConsistentPoint: a replicator slave whose epochs share
// nothing with the Java master's refuses: it neither cuts nor appends, says
// why in its status, and keeps retrying (the master sees more than one
// handshake) without the master sending a single frame.
func testASGoSlaveNoConsistentPoint(t *testing.T, classes string) {
	l := buildASLog(t, 100)
	jm := startASJavaMaster(t, classes, l, []asEpoch{{1, 0}, {2, l.offsets[50]}}, l.max())
	sdir := t.TempDir()
	lg := openLog(t, sdir)
	end := appendASRecords(t, lg, 1000, 20)[20]
	reg := prometheus.NewRegistry()
	r, ef := newASReplica(t, lg, sdir, 5, reg)
	if err := ef.Append(4, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.BecomeSlave(jm.addr); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two handshakes", func() error {
		if n := len(jm.events("handshake")); n < 2 {
			return fmt.Errorf("%d handshakes", n)
		}
		return nil
	})
	st := r.Status()
	if st.Slave == nil || st.Slave.Unhealthy == "" || st.Slave.Connected && st.Slave.HAState == "TRANSFER" {
		t.Errorf("slave status %+v: want unhealthy, not transferring", st.Slave)
	}
	if b := lg.Bounds(); b.Max != end {
		t.Errorf("slave log changed: max %d, want %d", b.Max, end)
	}
	if got := asEntries(ef); !slices.Equal(got, []asEpoch{{4, 0}}) {
		t.Errorf("slave epochs %v", got)
	}
	if n := len(jm.events("frame")); n != 0 {
		t.Errorf("master sent %d frames", n)
	}
	if n := asCounter(t, reg, "replicator_ha_no_consistent_point_total"); n < 1 {
		t.Errorf("replicator_ha_no_consistent_point_total %v, want at least 1", n)
	}
}

// testASDaemonMasterToJavaSlave: `replicator master --ha-protocol
// autoswitch`, fed by `replicator put`, replicates its whole log to an
// empty Java AutoSwitchSlave while puts continue; its status shows the
// slave's broker id and handshake state, the files are byte-identical and
// the Java slave's epoch file equals the daemon's.
func testASDaemonMasterToJavaSlave(t *testing.T, classes string) {
	addrs := freeAddrs(t, 2)
	dir := t.TempDir()
	seg := strconv.Itoa(segSize)
	startNode(t, "master", addrs[0], "master", "--data", dir, "--listen", addrs[0], "--ha-listen", addrs[1],
		"--segment-size", seg, "--ha-protocol", "autoswitch", "--broker-id", "1")
	replicatorPut(t, addrs[0], 0, 200)
	sdir := t.TempDir()
	js := startJava(t, classes, "java-as-slave", "AutoSwitchSlave", addrs[1], sdir, seg,
		"--broker-id", "7", "--report-ms", "200", "--split", "3")
	js.waitLine(`^frame `)
	replicatorPut(t, addrs[0], 200, 120)
	var st api.Status
	eventually(t, "the Java slave acks the master's max offset", func() error {
		st = status(t, addrs[0])
		if len(st.Slaves) != 1 || st.Slaves[0].AckOffset != st.MaxOffset {
			return fmt.Errorf("max %d, slaves %+v", st.MaxOffset, st.Slaves)
		}
		return nil
	})
	if sl := st.Slaves[0]; st.Protocol != "autoswitch" || st.Epoch != 1 || sl.BrokerID != 7 || sl.HandshakeState != "TRANSFER" {
		t.Errorf("master status %+v", st)
	}
	es := readASEpochFile(t, dir)
	if len(es) != 1 || es[0].epoch != 1 {
		t.Fatalf("daemon epochs %v", es)
	}
	if first := checkASFrames(t, js, es); first != 0 {
		t.Errorf("first frame at %d, want 0", first)
	}
	if err := sameLog(sdir, filepath.Join(dir, "commitlog"), segSize, 0, st.MaxOffset); err != nil {
		t.Fatal(err)
	}
	if got := readASEpochFile(t, sdir); !slices.Equal(got, es) {
		t.Errorf("Java slave epochs %v, want the daemon's %v", got, es)
	}
	js.noErrors()
}

// testASJavaMasterToDaemonSlave: the Java AutoSwitchMaster feeds
// `replicator slave --ha-protocol autoswitch`: byte-identical files, the
// master's three epochs in the slave's epoch file and status, the records
// readable through the slave's API.
func testASJavaMasterToDaemonSlave(t *testing.T, classes string) {
	l := buildASLog(t, 400)
	es := threeEpochs(l)
	jm := startASJavaMaster(t, classes, l, es, l.max(), "--heartbeat-ms", "200")
	addrs := freeAddrs(t, 2) // the slave's API; an address nobody serves as the master's API
	dir := t.TempDir()
	startNode(t, "slave", addrs[0], "slave", "--data", dir, "--listen", addrs[0], "--master", jm.addr,
		"--master-api", "http://"+addrs[1], "--segment-size", strconv.Itoa(segSize), "--reconnect-delay", "100ms",
		"--metadata-interval", "1h", "--ha-protocol", "autoswitch", "--broker-id", "9")
	jm.waitLine(`^handshake 9 0 0$`)
	var st api.Status
	eventually(t, "replicator slave catches up", func() error {
		if st = status(t, addrs[0]); st.MaxOffset != l.max() || st.MinOffset != 0 {
			return fmt.Errorf("slave [%d, %d), Java master [0, %d)", st.MinOffset, st.MaxOffset, l.max())
		}
		return nil
	})
	if err := sameLog(filepath.Join(dir, "commitlog"), l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := readASEpochFile(t, dir); !slices.Equal(got, es) {
		t.Errorf("daemon slave epochs %v, want the master's %v", got, es)
	}
	if st.Protocol != "autoswitch" || st.Epoch != 5 || st.EpochEntries != 3 || st.Master == nil || st.Master.HandshakeState != "TRANSFER" {
		t.Errorf("slave status %+v master %+v", st, st.Master)
	}
	var msgs api.Messages
	if err := getJSON(fmt.Sprintf("http://%s/v1/messages?offset=%d&max=5", addrs[0], es[2].start), &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs.Messages) != 5 || msgs.Messages[0].Offset != es[2].start {
		t.Fatalf("GET /v1/messages from %d: %+v", es[2].start, msgs.Messages)
	}
	for _, m := range msgs.Messages {
		k, err := strconv.Atoi(strings.TrimPrefix(m.Keys, "k"))
		if err != nil || m.Topic != "TopicTest" || m.QueueID != int32(k%4) || !bytes.Equal(m.Body, asMessage(k).Body) {
			t.Errorf("message at %d: topic %q keys %q queue %d body %d bytes", m.Offset, m.Topic, m.Keys, m.QueueID, len(m.Body))
		}
	}
	jm.noErrors()
}

// asLogBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type asLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *asLogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *asLogBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// testASGoSlaveBadState: the Java master sends its 5th transfer frame with
// the state SUSPEND instead of TRANSFER. replicator's slave must drop the
// connection with one log line naming the bad state, append nothing of that
// frame, reconnect, handshake again (nothing to cut) and end byte-identical.
func testASGoSlaveBadState(t *testing.T, classes string) {
	l := buildASLog(t, 300)
	es := threeEpochs(l)
	jm := startASJavaMaster(t, classes, l, es, l.max(), "--bad-state-frame", "5")
	sdir := t.TempDir()
	lg := openLog(t, sdir)
	var logs asLogBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	r, ef := newASReplicaLogger(t, lg, sdir, 2, nil, logger)
	if err := r.BecomeSlave(jm.addr); err != nil {
		t.Fatal(err)
	}
	bad := jm.waitLine(`^bad-state-frame (\d+) (\d+)$`)
	waitASSlaveMax(t, lg, l.max())
	if n := jm.count("accepted"); n != 2 {
		t.Errorf("Java master accepted %d connections, want 2 (one reconnect)", n)
	}
	if starts := jm.events("start"); len(starts) != 2 || strconv.FormatInt(starts[1][0], 10) != bad[1] {
		t.Errorf("starts %v: the second connection must resume at the bad frame's offset %s", starts, bad[1])
	}
	if err := sameLog(filepath.Join(sdir, "commitlog"), l.dir, segSize, 0, l.max()); err != nil {
		t.Fatal(err)
	}
	if got := asEntries(ef); !slices.Equal(got, es) {
		t.Errorf("Go slave epochs %v, want %v", got, es)
	}
	var stateLines []string
	for _, line := range logs.lines() {
		if strings.Contains(line, "SUSPEND") || strings.Contains(line, "bad HA state") {
			stateLines = append(stateLines, line)
		}
	}
	if len(stateLines) != 1 {
		t.Errorf("%d log lines about the bad state, want 1:\n%s", len(stateLines), strings.Join(logs.lines(), "\n"))
	}
	if st := r.Status(); st.Slave == nil || st.Slave.Reconnects < 1 {
		t.Errorf("slave status %+v: want a reconnect", st.Slave)
	}
	jm.noErrors()
}
