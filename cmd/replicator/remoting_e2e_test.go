package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/node/testpki"
	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/remoting"
)

// TestE2ERemotingMetadata runs a real master serving RocketMQ remoting on
// --remoting-listen and a real slave with --metadata-source remoting (its
// --master-api points at a dead port, so HTTP cannot be what carries the
// metadata): a topic PUT on the master appears on the slave; the master
// answers an unknown code with REQUEST_CODE_NOT_SUPPORTED, closes a
// malformed connection, and counts requests by code.
func TestE2ERemotingMetadata(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pp := ports(t, 2)
	rem, deadAPI := pp[0], pp[1]
	m := startMaster(t, filepath.Join(dir, "m"), "--remoting-listen", rem, "--remoting-allow", "127.0.0.1")
	s := startSlave(t, filepath.Join(dir, "s"), m, "--metadata-source", "remoting", "--master-remoting", rem,
		"--master-api", "http://"+deadAPI)

	code, b := httpDo(t, "PUT", m.api+"/v1/metadata/"+metadata.TopicsName, nil,
		[]byte(`{"topicConfigTable":{"RemotingTopic":{"topicName":"RemotingTopic","perm":6,"readQueueNums":4,"writeQueueNums":4}}}`))
	if code != 200 {
		t.Fatalf("PUT topics on the master: %d %s", code, b)
	}
	master, err := getDoc(t, m.api, metadata.TopicsName)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the topic on the slave", func() error {
		d, err := getDoc(t, s.api, metadata.TopicsName)
		if err != nil {
			return err
		}
		if d.Version != master.Version || !strings.Contains(string(d.Body), `"RemotingTopic"`) {
			return fmt.Errorf("slave has %+v %s", d.Version, d.Body)
		}
		return nil
	})

	c, err := net.Dial("tcp", rem)
	if err != nil {
		t.Fatal(err)
	}
	cl := remoting.NewClient(c, 0)
	resp, err := cl.Invoke(context.Background(), &remoting.Command{Code: 310, Serialize: remoting.ROCKETMQ}) // SEND_MESSAGE_V2
	cl.Close()
	if err != nil || resp.Code != remoting.RequestCodeNotSupported || resp.Remark != " request type 310 not supported" {
		t.Fatalf("unknown code: %+v, %v", resp, err)
	}

	bad, err := net.Dial("tcp", rem)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.Write([]byte{0, 0, 0, 4, 9, 0, 0, 0}) // serialize type 9
	bad.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := bad.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("malformed frame: read %d, %v; want the connection closed", n, err)
	}

	eventually(t, "remoting metrics", func() error {
		_, body := httpDo(t, "GET", m.api+"/metrics", nil, nil)
		for _, want := range []string{`replicator_remoting_requests_total{code="21"}`, `replicator_remoting_requests_total{code="other"} 1`, `replicator_remoting_errors_total{reason="malformed"} 1`} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("no %s in the master's metrics", want)
			}
		}
		return nil
	})
}

func TestRemotingDefaults(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:10912", "127.0.0.1:10909"},
		{"[::1]:20003", "[::1]:20000"},
		{"h:3", ""},
	} {
		if got := defaultMasterRemoting(tc.in); got != tc.want {
			t.Errorf("defaultMasterRemoting(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestE2ERemotingTLS: the remoting port over mutual TLS; the slave pulls
// with its client certificate, and a plain-TCP client gets no answer.
func TestE2ERemotingTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := testpki.NewCA(t, "replicator remoting CA")
	caFile := ca.WriteCA(t, pkiDir, "ca.pem")
	srvCert, srvKey := ca.Server(t, "node").Write(t, pkiDir, "node")
	cliCert, cliKey := ca.Client(t, "slave-1").Write(t, pkiDir, "slave-1")
	rem := ports(t, 1)[0]
	m := startMaster(t, filepath.Join(dir, "m"), "--remoting-listen", rem,
		"--remoting-tls-cert", srvCert, "--remoting-tls-key", srvKey, "--remoting-tls-client-ca", caFile)
	s := startSlave(t, filepath.Join(dir, "s"), m, "--metadata-source", "remoting", "--master-remoting", rem,
		"--master-remoting-tls-ca", caFile, "--master-remoting-tls-cert", cliCert, "--master-remoting-tls-key", cliKey)
	if code, b := httpDo(t, "PUT", m.api+"/v1/metadata/"+metadata.SubscriptionGroupName, nil,
		[]byte(`{"subscriptionGroupTable":{"TLSGroup":{"groupName":"TLSGroup"}}}`)); code != 200 {
		t.Fatalf("PUT: %d %s", code, b)
	}
	eventually(t, "the group on the slave", func() error {
		d, err := getDoc(t, s.api, metadata.SubscriptionGroupName)
		if err != nil {
			return err
		}
		if !strings.Contains(string(d.Body), `"TLSGroup"`) {
			return fmt.Errorf("slave has %s", d.Body)
		}
		return nil
	})
	c, err := net.Dial("tcp", rem)
	if err != nil {
		t.Fatal(err)
	}
	cl := remoting.NewClient(c, 0)
	defer cl.Close()
	if resp, err := cl.Invoke(context.Background(), &remoting.Command{Code: remoting.GetAllTopicConfig}); err == nil {
		t.Fatalf("a plain-TCP client got an answer from the TLS port: %+v", resp)
	}
}

// TestRemotingWiringOptions checks the flag combinations newRemotingWiring
// refuses and what it builds from the others.
func TestRemotingWiringOptions(t *testing.T) {
	master := func(r remotingOpts) *nodeOpts {
		if r.Listen == nil {
			r.Listen = []string{defaultRemotingListen}
			r.listenSets = 1
		}
		return &nodeOpts{Listen: "127.0.0.1:20911", rem: r}
	}
	if w, err := newRemotingWiring("master", master(remotingOpts{})); err != nil || len(w.listen) != 1 || w.optional != defaultRemotingListen {
		t.Fatalf("default: %+v, %v", w, err)
	}
	if w, err := newRemotingWiring("master", master(remotingOpts{Listen: []string{}})); w != nil || err != nil {
		t.Fatalf("empty list: %+v, %v", w, err)
	}
	if w, err := newRemotingWiring("master", master(remotingOpts{Listen: []string{"off"}})); w != nil || err != nil {
		t.Fatalf("off: %+v, %v", w, err)
	}
	w, err := newRemotingWiring("master", master(remotingOpts{Listen: []string{"0.0.0.0:10909", "0.0.0.0:10911"}, Allow: []string{"10.0.0.0/8"}, MaxConns: 7, PerIP: 2}))
	if err != nil || len(w.listen) != 2 || w.optional != "" || len(w.tcpOpts.Allow) != 1 || w.tcpOpts.MaxConns != 7 || w.tcpOpts.MaxConnsPerIP != 2 {
		t.Fatalf("explicit: %+v, %v", w, err)
	}
	for name, o := range map[string]*nodeOpts{
		"off with an address":           master(remotingOpts{Listen: []string{"off", "127.0.0.1:1"}}),
		"client CA without certificate": master(remotingOpts{TLSClientCA: "ca.pem"}),
		"missing certificate file":      master(remotingOpts{TLSCert: "/nonexistent.pem", TLSKey: "/nonexistent.key"}),
		"bad allow":                     master(remotingOpts{Allow: []string{"not-an-ip"}}),
		"slave cert without CA":         {Master: "127.0.0.1:10912", rem: remotingOpts{MetadataSource: "remoting", MasterTLSCert: "c.pem"}},
		"slave no derivable address":    {Master: "h:2", rem: remotingOpts{MetadataSource: "remoting"}},
		"slave bad address":             {Master: "h:10912", rem: remotingOpts{MetadataSource: "remoting", MasterRemoting: "nope"}},
	} {
		role := "master"
		if o.Master != "" {
			role = "slave"
		}
		if w, err := newRemotingWiring(role, o); err == nil {
			t.Errorf("%s: accepted (%+v)", name, w)
		}
	}
	if w, err := newRemotingWiring("slave", &nodeOpts{Master: "10.1.2.3:10912", rem: remotingOpts{MetadataSource: "http"}}); w != nil || err != nil {
		t.Fatalf("http source: %+v, %v", w, err)
	}
	if w, err := newRemotingWiring("slave", &nodeOpts{Master: "10.1.2.3:10912", rem: remotingOpts{MetadataSource: "remoting"}}); err != nil || w.addr != "10.1.2.3:10909" {
		t.Fatalf("remoting source: %+v, %v", w, err)
	}
	// A slave's server runs after a promote: autoswitch only, never
	// optional (no default address).
	slave := func(protocol string, listen ...string) *nodeOpts {
		return &nodeOpts{Master: "10.1.2.3:10912", as: autoSwitchOpts{Protocol: protocol}, rem: remotingOpts{MetadataSource: "http", Listen: listen, listenSets: 1}}
	}
	if w, err := newRemotingWiring("slave", slave("classic", "off")); w != nil || err != nil {
		t.Fatalf("classic slave, default off: %+v, %v", w, err)
	}
	if w, err := newRemotingWiring("slave", slave("classic", "127.0.0.1:10909")); err == nil {
		t.Fatalf("classic slave with --remoting-listen: accepted (%+v)", w)
	}
	if w, err := newRemotingWiring("slave", slave("autoswitch", defaultRemotingListen)); err != nil || len(w.listen) != 1 || w.optional != "" || w.addr != "" {
		t.Fatalf("autoswitch slave with --remoting-listen: %+v, %v", w, err)
	}
	if w, err := newRemotingWiring("node", &nodeOpts{rem: remotingOpts{Listen: []string{"127.0.0.1:10909"}, listenSets: 2}}); err != nil || len(w.listen) != 1 || w.optional != "" {
		t.Fatalf("node with --remoting-listen: %+v, %v", w, err)
	}
	if w, err := newRemotingWiring("node", &nodeOpts{rem: remotingOpts{Listen: []string{"off"}, listenSets: 1}}); w != nil || err != nil {
		t.Fatalf("node, default off: %+v, %v", w, err)
	}
}

// TestE2ERemotingDefaultBusy: a master whose default remoting address is
// taken (a second master on the machine) warns and runs; an address given
// explicitly that is taken stops it.
func TestE2ERemotingDefaultBusy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", defaultRemotingListen)
	if err != nil {
		t.Skipf("cannot hold %s for the test (another process has it): %v", defaultRemotingListen, err)
	}
	defer ln.Close()
	dir := t.TempDir()
	m := startMaster(t, filepath.Join(dir, "m"))
	if code, _ := httpDo(t, "GET", m.api+"/v1/status", nil, nil); code != 200 {
		t.Fatalf("status of a master without its default remoting port: %d", code)
	}
	b, err := os.ReadFile(m.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "[WARN]") || !strings.Contains(string(b), "cannot serve RocketMQ remoting on its default address") {
		t.Fatalf("no warning about the busy default remoting address:\n%s", b)
	}

	pp := ports(t, 2)
	p := start(t, "master-explicit", "master", "--data", filepath.Join(dir, "m2"), "--listen", pp[0], "--ha-listen", pp[1],
		"--segment-size", testSegment, "--remoting-listen", ln.Addr().String())
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("a master whose explicit --remoting-listen is taken kept running")
	}
	if p.err == nil {
		t.Fatal("a master whose explicit --remoting-listen is taken exited 0")
	}
}
