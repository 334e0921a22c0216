package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/replicatorhq/replicator/internal/api"
)

// roleAPI is an httptest server standing in for a node's POST /v1/role: it
// records each request and answers code with answer.
type roleAPI struct {
	mu     sync.Mutex
	bodies []string
	auth   []string
	code   int
	answer any
}

func (f *roleAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, r.Method+" "+r.URL.Path+" "+string(b))
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	code, ans := f.code, f.answer
	f.mu.Unlock()
	api.WriteJSON(w, code, ans)
}

func runInProcess(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, cleanEnv(), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestRoleCommands: promote and demote send the documented body to
// POST /v1/role, with the token, print the new status, and exit 1 with the
// node's message when it refuses.
func TestRoleCommands(t *testing.T) {
	f := &roleAPI{code: 200, answer: api.Status{Role: "SYNC_MASTER", Protocol: "autoswitch", Epoch: 4, EpochEntries: 3, BrokerID: 7, ConfirmOffset: 1234, InSync: []int64{7, 9},
		Slaves: []api.SlaveStatus{{Addr: "127.0.0.1:4000", BrokerID: 9, HandshakeState: "TRANSFER", InSync: true}}}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret-token-of-some-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errb := runInProcess("promote", "--api", srv.URL, "--token-file", tok)
	if code != exitOK {
		t.Fatalf("promote: exit %d: %s", code, errb)
	}
	for _, want := range []string{"promote: " + srv.URL + " is now SYNC_MASTER (epoch 4)", "protocol", "autoswitch", "epoch           4 (3 entries)", "confirm offset  1234", "in-sync set     [7 9]", "9          127.0.0.1:4000  TRANSFER   true"} {
		if !strings.Contains(out, want) {
			t.Errorf("promote output does not hold %q:\n%s", want, out)
		}
	}
	code, _, errb = runInProcess("promote", "--api", srv.URL, "--epoch", "9", "--token-file", tok)
	if code != exitOK {
		t.Fatalf("promote --epoch: exit %d: %s", code, errb)
	}
	f.answer = api.Status{Role: "SLAVE", Protocol: "autoswitch", Epoch: 4, Master: &api.MasterLink{Addr: "127.0.0.1:10912", HandshakeState: "HANDSHAKE",
		LastTruncation: &api.Truncation{From: 2000, To: 1000, Bytes: 1000, Records: 5, MsAgo: 1500}}}
	code, out, errb = runInProcess("demote", "--api", srv.URL, "--master", "127.0.0.1:10912", "--token-file", tok)
	if code != exitOK {
		t.Fatalf("demote: exit %d: %s", code, errb)
	}
	for _, want := range []string{"is now SLAVE", "handshake        HANDSHAKE", "last truncation  2000 -> 1000 (1000 B, 5 records) 1.5s ago"} {
		if !strings.Contains(out, want) {
			t.Errorf("demote output does not hold %q:\n%s", want, out)
		}
	}
	code, out, _ = runInProcess("demote", "--api", srv.URL, "--master", "127.0.0.1:10912", "--json", "--token-file", tok)
	var st api.Status
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Master == nil || st.Master.LastTruncation.Records != 5 {
		t.Fatalf("demote --json: exit %d:\n%s", code, out)
	}

	f.mu.Lock()
	bodies, auth := f.bodies, f.auth
	f.mu.Unlock()
	want := []string{
		`POST /v1/role {"role":"master"}`,
		`POST /v1/role {"role":"master","epoch":9}`,
		`POST /v1/role {"role":"slave","master":"127.0.0.1:10912"}`,
		`POST /v1/role {"role":"slave","master":"127.0.0.1:10912"}`,
	}
	if strings.Join(bodies, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant\n%s", strings.Join(bodies, "\n"), strings.Join(want, "\n"))
	}
	for _, a := range auth {
		if a != "Bearer s3cret-token-of-some-length" {
			t.Fatalf("Authorization %q", a)
		}
	}

	// Refused: exit 1 with the node's message and code.
	f.code, f.answer = 409, api.ErrorAnswer{Error: "role change refused: already the master of epoch 4"}
	code, _, errb = runInProcess("promote", "--api", srv.URL)
	if code != exitError || !strings.Contains(errb, "409") || !strings.Contains(errb, "already the master of epoch 4") {
		t.Fatalf("refused promote: exit %d: %s", code, errb)
	}
	// Bad usage: exit 2, nothing sent.
	f.mu.Lock()
	n := len(f.bodies)
	f.mu.Unlock()
	for _, args := range [][]string{
		{"demote", "--api", srv.URL},
		{"demote", "--api", srv.URL, "--master", "nohost"},
		{"promote", "--api", srv.URL, "--epoch", "-1"},
		{"promote", "--api", srv.URL, "extra"},
	} {
		if code, _, errb := runInProcess(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, exitUsage, errb)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) != n {
		t.Fatalf("bad usage sent %d requests", len(f.bodies)-n)
	}
}

// TestAutoSwitchFlagsNeedAutoSwitch: the autoswitch-only flags are refused
// in classic mode (exit 2), and --allow-diverged-rejoin in autoswitch mode.
func TestAutoSwitchFlagsNeedAutoSwitch(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"master", "--broker-id", "3"}, "--broker-id needs --ha-protocol autoswitch"},
		{[]string{"slave", "--read-confirmed"}, "--read-confirmed needs --ha-protocol autoswitch"},
		{[]string{"slave", "--replication", "sync"}, "--replication is for a promoted slave"},
		{[]string{"slave", "--ha-protocol", "autoswitch", "--allow-diverged-rejoin"}, "--allow-diverged-rejoin is for --ha-protocol classic"},
		{[]string{"master", "--ha-protocol", "raft"}, "raft"},
		{[]string{"slave", "--ha-protocol", "autoswitch", "--broker-id", "0"}, "broker-id"},
	} {
		args := append(c.args, "--data", filepath.Join(dir, "d"), "--listen", "127.0.0.1:0")
		code, _, errb := runInProcess(args...)
		if code != exitUsage || !strings.Contains(errb, c.want) {
			t.Errorf("%v: exit %d, want %d with %q: %s", c.args, code, exitUsage, c.want, errb)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Fatal("a refused start created the data directory")
	}
}
