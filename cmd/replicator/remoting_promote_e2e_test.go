package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/proctest"
	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// TestAutoSwitchSlaveRemotingFollowsRole: an autoswitch slave started with
// --remoting-listen serves no remoting while it is a slave; promoted, it
// answers GET_ALL_TOPIC_CONFIG (a Go remoting client, JSON header) with the
// topics it synced from its old master and the same DataVersion; demoted,
// its port refuses connections; promoted again, it serves again (the
// server's metrics are re-registered on the same registry).
func TestAutoSwitchSlaveRemotingFollowsRole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rem := ports(t, 1)[0]
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "m"), "", "", "--remoting-listen", "off")
	s := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "s"), m.HA, m.API, "--remoting-listen", rem)
	mc, sc := newASClient(t, m), newASClient(t, s)

	code, b := httpDo(t, "PUT", m.API+"/v1/metadata/"+metadata.TopicsName, nil,
		[]byte(`{"topicConfigTable":{"PromotedTopic":{"topicName":"PromotedTopic","perm":6,"readQueueNums":4,"writeQueueNums":4}}}`))
	if code != 200 {
		t.Fatalf("PUT topics on the master: %d %s", code, b)
	}
	var put metadata.PutResponse
	if err := json.Unmarshal(b, &put); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the topics on the slave", func() error {
		d, err := getDoc(t, s.API, metadata.TopicsName)
		if err == nil && d.Version != put.Version {
			err = fmt.Errorf("slave at %+v, want %+v", d.Version, put.Version)
		}
		return err
	})
	checkRemotingRefused(t, rem, "a slave")

	demote := func(api, master, masterAPI string) {
		t.Helper()
		code, out, errb := runCLI(t, "", "demote", "--api", api, "--master", master, "--master-api", masterAPI)
		if code != 0 || !strings.Contains(out, "is now SLAVE") {
			t.Fatalf("demote %s: exit %d:\n%s%s", api, code, out, errb)
		}
	}
	promote := func(api string) {
		t.Helper()
		code, out, errb := runCLI(t, "", "promote", "--api", api)
		if code != 0 || !strings.Contains(out, "is now ASYNC_MASTER") {
			t.Fatalf("promote %s: exit %d:\n%s%s", api, code, out, errb)
		}
	}

	demote(m.API, s.HA, s.API)
	promote(s.API)
	checkRemotingTopics(t, rem, "PromotedTopic", put.Version)

	// Back: S demoted (stops serving at once, before the request answers),
	// M promoted.
	demote(s.API, m.HA, m.API)
	checkRemotingRefused(t, rem, "the demoted slave")
	promote(m.API)
	waitFollowing(t, sc, mc)

	// And once more: the server comes back on the same port.
	demote(m.API, s.HA, s.API)
	promote(s.API)
	checkRemotingTopics(t, rem, "PromotedTopic", put.Version)
	_, metrics := httpDo(t, "GET", s.API+"/metrics", nil, nil)
	if !strings.Contains(string(metrics), `replicator_remoting_requests_total{code="21"} 2`) {
		t.Fatalf("the promoted slave's remoting metrics lost a count:\n%s", grepLines(string(metrics), "replicator_remoting_requests_total"))
	}
	if log := s.ReadLog(); !strings.Contains(log, "serving RocketMQ remoting (metadata)") || !strings.Contains(log, "remoting=true") {
		t.Fatalf("no remoting line in the promoted slave's log:\n%s", log)
	}
}

// TestClassicSlaveRefusesRemotingListen: a classic slave never becomes a
// master, so --remoting-listen there is a usage error (exit 2).
func TestClassicSlaveRefusesRemotingListen(t *testing.T) {
	t.Parallel()
	code, out, errb := runCLI(t, "", "slave", "--data", filepath.Join(t.TempDir(), "s"), "--listen", "127.0.0.1:1",
		"--remoting-listen", "127.0.0.1:2")
	if code != 2 || !strings.Contains(errb, "--remoting-listen on a slave serves remoting after a promote: it needs --ha-protocol autoswitch") {
		t.Fatalf("exit %d:\n%s%s", code, out, errb)
	}
}

// checkRemotingTopics asks addr for GET_ALL_TOPIC_CONFIG over RocketMQ
// remoting and checks the answer: SUCCESS, the topic, the DataVersion.
func checkRemotingTopics(t *testing.T, addr, topic string, version meta.DataVersion) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("remoting on %s: %v", addr, err)
	}
	cl := remoting.NewClient(c, 0)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, &remoting.Command{Code: remoting.GetAllTopicConfig, Serialize: remoting.JSON})
	if err != nil {
		t.Fatalf("GET_ALL_TOPIC_CONFIG on %s: %v", addr, err)
	}
	if resp.Code != remoting.Success {
		t.Fatalf("GET_ALL_TOPIC_CONFIG on %s: code %d %q", addr, resp.Code, resp.Remark)
	}
	var wrapper struct {
		TopicConfigTable map[string]json.RawMessage `json:"topicConfigTable"`
		DataVersion      meta.DataVersion           `json:"dataVersion"`
	}
	if err := json.Unmarshal(resp.Body, &wrapper); err != nil {
		t.Fatalf("GET_ALL_TOPIC_CONFIG body %s: %v", resp.Body, err)
	}
	if _, ok := wrapper.TopicConfigTable[topic]; !ok || wrapper.DataVersion != version {
		t.Fatalf("GET_ALL_TOPIC_CONFIG on %s: %s, want %s at %+v", addr, resp.Body, topic, version)
	}
}

// checkRemotingRefused checks that nothing listens on addr.
func checkRemotingRefused(t *testing.T, addr, who string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("%s serves remoting on %s: %v", who, addr, err)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
