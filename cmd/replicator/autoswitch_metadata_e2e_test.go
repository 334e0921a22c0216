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

	"github.com/replicatorhq/replicator/internal/proctest"
	"github.com/replicatorhq/replicator/plugins/metadata"
)

// TestAutoSwitchMetadataFollowsRole: the metadata extension follows
// runtime role changes. Master M (serving remoting) and slave S run as the
// daemon runs them; a document PUT on M reaches S. M is demoted with
// `replicator demote --master-api` and S promoted: M refuses metadata
// writes (403) and stops serving remoting at once, S takes them, and a
// document PUT on S reaches M through M's new syncer; S's old syncer no
// longer pulls (its copy of a document M cannot change stays S's).
// replicator_build_info and the put 403's master_api follow the roles.
func TestAutoSwitchMetadataFollowsRole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rem := ports(t, 1)[0]
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "m"), "", "",
		"--remoting-listen", rem, "--metadata-interval", "500ms")
	s := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "s"), m.HA, m.API)
	mc, sc := newASClient(t, m), newASClient(t, s)

	putDoc := func(api, name, body string) (int, metadata.PutResponse, string) {
		t.Helper()
		code, b := httpDo(t, "PUT", api+"/v1/metadata/"+name, nil, []byte(body))
		var pr metadata.PutResponse
		if code == 200 {
			if err := json.Unmarshal(b, &pr); err != nil {
				t.Fatalf("PUT %s on %s: %v %s", name, api, err, b)
			}
		}
		return code, pr, string(b)
	}
	waitDoc := func(api string, want metadata.PutResponse) {
		t.Helper()
		eventually(t, want.Name+" on "+api, func() error {
			d, err := getDoc(t, api, want.Name)
			if err == nil && d.Version != want.Version {
				err = fmt.Errorf("at %+v, want %+v", d.Version, want.Version)
			}
			return err
		})
	}
	buildRole := func(c *proctest.Client, role string) error {
		_, body := httpDo(t, "GET", c.Base+"/metrics", nil, nil)
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "replicator_build_info{") {
				if !strings.Contains(l, `role="`+role+`"`) {
					return fmt.Errorf("%s: %s, want role %s", c.Base, l, role)
				}
				return nil
			}
		}
		return fmt.Errorf("%s: no replicator_build_info", c.Base)
	}

	code, before, b := putDoc(m.API, "acl-rules", `{"rules":["before"]}`)
	if code != 200 {
		t.Fatalf("PUT on the master: %d %s", code, b)
	}
	waitDoc(s.API, before)
	if code, _, b := putDoc(s.API, "acl-rules", `{"rules":["slave"]}`); code != 403 {
		t.Fatalf("PUT on the slave: %d %s", code, b)
	}
	if c, err := net.Dial("tcp", rem); err != nil {
		t.Fatalf("the master does not serve remoting on %s: %v", rem, err)
	} else {
		c.Close()
	}

	// Demote first, then promote: never two masters.
	code, out, errb := runCLI(t, "", "demote", "--api", m.API, "--master", s.HA, "--master-api", s.API)
	if code != 0 || !strings.Contains(out, "is now SLAVE") {
		t.Fatalf("demote: exit %d:\n%s%s", code, out, errb)
	}
	if code, _, b := putDoc(m.API, "acl-rules", `{"rules":["demoted"]}`); code != 403 {
		t.Fatalf("metadata PUT on the demoted master: %d %s, want 403", code, b)
	}
	if c, err := net.Dial("tcp", rem); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("the demoted master still serves remoting on %s: %v", rem, err)
	}
	if err := buildRole(mc, "SLAVE"); err != nil {
		t.Fatal(err)
	}
	code, out, errb = runCLI(t, "", "promote", "--api", s.API)
	if code != 0 || !strings.Contains(out, "is now ASYNC_MASTER") {
		t.Fatalf("promote: exit %d:\n%s%s", code, out, errb)
	}
	if err := buildRole(sc, "ASYNC_MASTER"); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Put(context.Background(), "TopicAS", []byte("refused")); !isCode(err, 403) ||
		!strings.Contains(err.Error(), s.API) {
		t.Fatalf("put on the demoted master: %v, want 403 naming %s", err, s.API)
	}

	code, after, b := putDoc(s.API, "acl-rules", `{"rules":["after"]}`)
	if code != 200 {
		t.Fatalf("PUT on the promoted slave: %d %s", code, b)
	}
	code, topics, b := putDoc(s.API, metadata.TopicsName, `{"topicConfigTable":{"Promoted":{"perm":6,"readQueueNums":1,"writeQueueNums":1}}}`)
	if code != 200 {
		t.Fatalf("PUT topics on the promoted slave: %d %s", code, b)
	}
	waitDoc(m.API, after)
	waitDoc(m.API, topics)
	if d, err := getDoc(t, m.API, "acl-rules"); err != nil || string(d.Body) != `{"rules":["after"]}` {
		t.Fatalf("acl-rules on the demoted master: %s %v", d.Body, err)
	}
	// S's syncer stopped at the promote: S keeps its own documents (a
	// running syncer would have pulled M's older acl-rules back, or
	// failed against a slave).
	if d, err := getDoc(t, s.API, "acl-rules"); err != nil || d.Version != after.Version {
		t.Fatalf("acl-rules on the new master: %+v %v", d.Version, err)
	}
	if log := s.ReadLog(); !strings.Contains(log, "promoted: metadata writes accepted") {
		t.Fatalf("no promote line in the new master's log:\n%s", log)
	}
	if log := m.ReadLog(); !strings.Contains(log, "demoted: metadata writes refused") || !strings.Contains(log, "syncing=true") {
		t.Fatalf("no demote line in the old master's log:\n%s", log)
	}
	waitFollowing(t, mc, sc)
}

// TestAutoSwitchDemoteWithoutMasterAPI: a demote without --master-api
// refuses metadata writes and says in one WARN line that metadata is not
// synchronised.
func TestAutoSwitchDemoteWithoutMasterAPI(t *testing.T) {
	t.Parallel()
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(t.TempDir(), "m"), "", "", "--remoting-listen", "off")
	code, out, errb := runCLI(t, "", "demote", "--api", m.API, "--master", "127.0.0.1:1")
	if code != 0 {
		t.Fatalf("demote: exit %d:\n%s%s", code, out, errb)
	}
	if code, b := httpDo(t, "PUT", m.API+"/v1/metadata/acl-rules", nil, []byte(`{}`)); code != 403 {
		t.Fatalf("metadata PUT on the demoted master: %d %s", code, b)
	}
	log := m.ReadLog()
	if n := strings.Count(log, "demoted without the new master's API address"); n != 1 || !strings.Contains(log, "[WARN]") {
		t.Fatalf("%d WARN lines about the missing master API in:\n%s", n, log)
	}
	if code, _, _ := runCLI(t, "", "demote", "--api", m.API, "--master", "127.0.0.1:2", "--master-api", "ftp://x"); code != 2 {
		t.Fatalf("demote with a bad --master-api: exit %d, want 2", code)
	}
}
