package interop

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/internal/api"
)

// The RocketMQ harness runs real RocketMQ 4.9 brokers (and a name server)
// from an unpacked binary distribution named by ROCKETMQ_HOME
// (rocketmq-all-4.9.x-bin-release: bin/, conf/, lib/). It starts every JVM
// directly with the distribution's classpath (conf/ and lib/*) instead of
// bin/mqbroker, whose runbroker.sh asks for an 8 GiB pre-touched heap.
// ROCKETMQ_JAVA names the java binary (default: java on PATH); RocketMQ 4.9
// targets Java 8, and on Java 9+ the harness opens the JDK internals the
// broker's store uses (direct-buffer cleaner, sun.nio.ch).

// rocketMQ is an unpacked distribution and how to run its JVMs.
type rocketMQ struct {
	home string
	java string
	opts []string // JVM options for every RocketMQ process
}

func needRocketMQ(t *testing.T) *rocketMQ {
	t.Helper()
	home := os.Getenv("ROCKETMQ_HOME")
	if home == "" {
		t.Skip("ROCKETMQ_HOME is not set: point it at an unpacked rocketmq-all-4.9.x-bin-release to run the real-broker interop tests (see interop/README.md)")
	}
	jars, _ := filepath.Glob(filepath.Join(home, "lib", "rocketmq-broker-4.9*.jar"))
	if len(jars) == 0 {
		t.Fatalf("ROCKETMQ_HOME=%s: no lib/rocketmq-broker-4.9*.jar; want an unpacked rocketmq-all-4.9.x-bin-release", home)
	}
	java := os.Getenv("ROCKETMQ_JAVA")
	if java == "" {
		var err error
		if java, err = exec.LookPath("java"); err != nil {
			t.Skip("java not on PATH and ROCKETMQ_JAVA not set: cannot run RocketMQ")
		}
	}
	r := &rocketMQ{home: home, java: java}
	r.opts = []string{"-server", "-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC",
		"-Drocketmq.home.dir=" + home,
		// A shared CI disk may be more than 90% full; RocketMQ would then refuse writes.
		"-Drocketmq.broker.diskSpaceWarningLevelRatio=0.99", "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.99"}
	if javaMajor(t, java) >= 9 {
		r.opts = append(r.opts,
			"--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
			"--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED")
	}
	t.Logf("RocketMQ %s (%s) with %s", filepath.Base(jars[0]), home, java)
	return r
}

// javaMajor returns the major version of the java binary (8 for "1.8.0_x").
func javaMajor(t *testing.T, java string) int {
	t.Helper()
	out, err := exec.Command(java, "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -version: %v\n%s", java, err, out)
	}
	m := regexp.MustCompile(`version "(?:1\.)?(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("cannot parse %s -version: %s", java, out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// run starts a RocketMQ JVM running mainClass. user.home is a temporary
// directory: RocketMQ writes its logs under ${user.home}/logs/rocketmqlogs.
func (r *rocketMQ) run(t *testing.T, label string, env []string, mainClass string, args ...string) *proc {
	t.Helper()
	home := t.TempDir()
	cp := filepath.Join(r.home, "conf") + string(os.PathListSeparator) + filepath.Join(r.home, "lib", "*")
	jargs := append(slices.Clone(r.opts), "-Duser.home="+home, "-cp", cp, mainClass)
	if env == nil {
		env = cleanEnv()
	}
	env = append(env, "ROCKETMQ_HOME="+r.home)
	p := startProc(t, label, env, home, r.java, append(jargs, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(home, "logs", "rocketmqlogs", "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil && len(b) > 0 {
					if len(b) > 16<<10 {
						b = b[len(b)-16<<10:]
					}
					t.Logf("--- %s %s (tail):\n%s", label, filepath.Base(l), b)
				}
			}
		}
	})
	return p
}

// writeConf writes a RocketMQ properties file.
func writeConf(t *testing.T, path string, kv [][2]string) {
	t.Helper()
	var b strings.Builder
	for _, e := range kv {
		fmt.Fprintf(&b, "%s=%s\n", e[0], e[1])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startNamesrv starts a RocketMQ name server and returns its address.
func (r *rocketMQ) startNamesrv(t *testing.T) string {
	t.Helper()
	addr := freeAddrs(t, 1)[0]
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "namesrv.conf")
	writeConf(t, conf, [][2]string{{"listenPort", port}})
	p := r.run(t, "namesrv", nil, "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", conf)
	p.waitLine(`boot success`)
	return addr
}

// brokerPort returns a remoting port P such that P-2 (the broker's VIP
// channel), P and P+1 (its HA port, forced to P+1 in 4.9) are free.
func brokerPort(t *testing.T) int {
	t.Helper()
	free := func(p int) bool {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	for range 100 {
		_, ps, _ := net.SplitHostPort(freeAddrs(t, 1)[0])
		p, _ := strconv.Atoi(ps)
		if p > 1026 && p < 65534 && free(p-2) && free(p+1) {
			return p
		}
	}
	t.Fatal("no free port P with P-2 and P+1 free")
	return 0
}

// startBroker writes a broker .conf from the common settings plus extra and
// starts the broker; it returns the broker's store root.
func (r *rocketMQ) startBroker(t *testing.T, label, namesrv string, port int, segSize int64, extra ...[2]string) string {
	t.Helper()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	conf := filepath.Join(dir, label+".conf")
	kv := [][2]string{
		{"brokerClusterName", "ReplicatorCluster"},
		{"brokerName", "replicator-a"},
		{"namesrvAddr", namesrv},
		{"brokerIP1", "127.0.0.1"},
		{"brokerIP2", "127.0.0.1"},
		{"listenPort", strconv.Itoa(port)}, // HA port: listenPort + 1 (4.9 forces it)
		{"storePathRootDir", store},
		{"storePathCommitLog", filepath.Join(store, "commitlog")},
		{"mappedFileSizeCommitLog", strconv.FormatInt(segSize, 10)},
		{"flushDiskType", "ASYNC_FLUSH"},
		{"autoCreateTopicEnable", "true"},
		{"diskMaxUsedSpaceRatio", "95"},
	}
	writeConf(t, conf, append(kv, extra...))
	p := r.run(t, label, nil, "org.apache.rocketmq.broker.BrokerStartup", "-c", conf)
	p.waitLine(`boot success`)
	return store
}

// TestRocketMQSlaveOfReplicatorMaster: a real RocketMQ 4.9 broker with
// brokerRole=SLAVE and a static haMasterAddress follows `replicator master`.
// Its first report (0, about 5 s after connecting) starts it at the
// master's last segment; messages put through `replicator put` afterwards
// cross segment ends; its commit-log files end up byte-identical to the
// master's, and its reput service builds the consume queue from the
// replicated records.
func TestRocketMQSlaveOfReplicatorMaster(t *testing.T) {
	rmq := needRocketMQ(t)
	const seg = 1 << 20
	addrs := freeAddrs(t, 2) // replicator API, HA
	mdir := t.TempDir()
	startNode(t, "replicator-master", addrs[0], "master", "--data", mdir, "--listen", addrs[0], "--ha-listen", addrs[1], "--segment-size", "1MiB")
	replicatorPut(t, addrs[0], 0, 400) // about 1.5 MiB: the slave starts in the second segment

	ns := rmq.startNamesrv(t)
	store := rmq.startBroker(t, "rocketmq-slave", ns, brokerPort(t), seg,
		[2]string{"brokerId", "1"}, [2]string{"brokerRole", "SLAVE"}, [2]string{"haMasterAddress", addrs[1]})

	var start int64
	eventually(t, "the RocketMQ slave requests 0 and acks its first frames", func() error {
		st := status(t, addrs[0])
		if len(st.Slaves) != 1 || st.Slaves[0].RequestOffset != 0 || st.Slaves[0].AckOffset == 0 {
			return fmt.Errorf("slaves %+v", st.Slaves)
		}
		start = st.MaxOffset - st.MaxOffset%seg
		return nil
	})
	replicatorPut(t, addrs[0], 400, 400)
	var max int64
	eventually(t, "the RocketMQ slave acks the master's max offset", func() error {
		st := status(t, addrs[0])
		max = st.MaxOffset
		if len(st.Slaves) != 1 || st.Slaves[0].AckOffset != max {
			return fmt.Errorf("max %d, slaves %+v", max, st.Slaves)
		}
		return nil
	})
	if err := compareLogs(filepath.Join(store, "commitlog"), filepath.Join(mdir, "commitlog"), seg, start, max, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the RocketMQ slave dispatches the replicated records to its consume queue", func() error {
		files, _ := filepath.Glob(filepath.Join(store, "consumequeue", "TopicTest", "0", "*"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.ContainsFunc(b, func(r rune) bool { return r != 0 }) {
				return nil
			}
		}
		return errors.New("no consume-queue entries for TopicTest/0 yet")
	})
}

// TestReplicatorSlaveOfRocketMQMaster: `replicator slave` follows a real
// RocketMQ 4.9 broker with brokerRole=ASYNC_MASTER (connecting while the
// broker's log is empty, so it receives everything from offset 0); the
// distribution's quickstart Producer sends 1000 messages; the slave's
// segment files end up byte-identical to the broker's (the broker's
// preallocated later files are all zeros), and the slave's API decodes the
// 1000 messages the broker encoded.
func TestReplicatorSlaveOfRocketMQMaster(t *testing.T) {
	rmq := needRocketMQ(t)
	const seg = 64 << 10 // 1000 quickstart messages are about 250 KiB: several segments
	ns := rmq.startNamesrv(t)
	port := brokerPort(t)
	store := rmq.startBroker(t, "rocketmq-master", ns, port, seg, [2]string{"brokerId", "0"}, [2]string{"brokerRole", "ASYNC_MASTER"})

	addrs := freeAddrs(t, 2) // replicator slave API; an address nobody serves as the master's API
	sdir := t.TempDir()
	startNode(t, "replicator-slave", addrs[0], "slave", "--data", sdir, "--listen", addrs[0],
		"--master", fmt.Sprintf("127.0.0.1:%d", port+1), "--master-api", "http://"+addrs[1],
		"--segment-size", "64KiB", "--reconnect-delay", "100ms", "--metadata-interval", "1h")
	eventually(t, "replicator slave connects to the broker", func() error {
		if st := status(t, addrs[0]); st.Master == nil || !st.Master.Connected {
			return fmt.Errorf("master link %+v", st.Master)
		}
		return nil
	})

	prod := rmq.run(t, "producer", append(cleanEnv(), "NAMESRV_ADDR="+ns), "org.apache.rocketmq.example.quickstart.Producer")
	if err := prod.wait(); err != nil {
		t.Fatalf("quickstart Producer: %v", prod.err)
	}
	if n := strings.Count(strings.Join(prod.output(), "\n"), "SEND_OK"); n != 1000 {
		t.Fatalf("quickstart Producer: %d SEND_OK, want 1000", n)
	}

	bdir := filepath.Join(store, "commitlog")
	eventually(t, "replicator slave byte-identical to the broker", func() error {
		st := status(t, addrs[0])
		if st.MaxOffset == 0 {
			return errors.New("slave still empty")
		}
		if err := sameLog(filepath.Join(sdir, "commitlog"), bdir, seg, st.MinOffset, st.MaxOffset); err != nil {
			return err
		}
		// Broker files past the slave's last segment: preallocated zeros only.
		return compareLogs(bdir, filepath.Join(sdir, "commitlog"), seg, st.MinOffset, st.MaxOffset, true)
	})

	st := status(t, addrs[0])
	sent := 0
	for off := st.MinOffset; off < st.MaxOffset; {
		var msgs api.Messages
		if err := getJSON(fmt.Sprintf("http://%s/v1/messages?offset=%d&max=256", addrs[0], off), &msgs); err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs.Messages {
			if m.Topic == "TopicTest" && m.Tags == "TagA" && bytes.HasPrefix(m.Body, []byte("Hello RocketMQ ")) {
				sent++
			}
		}
		if msgs.NextOffset <= off {
			break
		}
		off = msgs.NextOffset
	}
	if sent != 1000 {
		t.Errorf("replicator slave decodes %d quickstart messages, want 1000", sent)
	}
}
