package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRoleFileRoundTrip: a written role file reads back the same, its
// bytes are one JSON object and a newline, and no temporary file stays.
func TestRoleFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadRoleFile(dir); ok || err != nil {
		t.Fatalf("empty directory: ok=%v err=%v", ok, err)
	}
	at := time.Date(2026, 12, 2, 16, 5, 0, 123_456_789, time.FixedZone("X", 3600))
	rec := RoleRecord{Role: RoleMaster, Protocol: "autoswitch", Epoch: 3, BrokerID: 4711, Time: at}
	if err := WriteRoleFile(dir, rec); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, RoleFileName))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"format":1,"role":"master","protocol":"autoswitch","epoch":3,"broker_id":4711,"time":"2026-12-02T15:05:00.123Z"}` + "\n"
	if string(b) != want {
		t.Fatalf("file:\n%s\nwant\n%s", b, want)
	}
	got, ok, err := ReadRoleFile(dir)
	if err != nil || !ok {
		t.Fatalf("read: ok=%v err=%v", ok, err)
	}
	if got.Role != RoleMaster || got.Protocol != "autoswitch" || got.Epoch != 3 || got.BrokerID != 4711 || !got.Time.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("read back %+v", got)
	}
	rec.Role, rec.Epoch = RoleSlave, 4
	if err := WriteRoleFile(dir, rec); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ReadRoleFile(dir); got.Role != RoleSlave || got.Epoch != 4 {
		t.Fatalf("after the second write: %+v", got)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != RoleFileName {
		t.Fatalf("directory holds %v, want only %s", ents, RoleFileName)
	}
}

// TestRoleFileInvalid: damaged or foreign content is refused with
// ErrRoleFile naming the file, never silently taken as "no history".
func TestRoleFileInvalid(t *testing.T) {
	for _, c := range []struct{ name, content, want string }{
		{"empty", "", "EOF"},
		{"not json", "master\n", "invalid character"},
		{"truncated", `{"format":1,"role":"mas`, "unexpected EOF"},
		{"format", `{"format":2,"role":"master","protocol":"classic"}`, "format 2"},
		{"role", `{"format":1,"role":"leader","protocol":"classic"}`, `role "leader"`},
		{"protocol", `{"format":1,"role":"master","protocol":"raft"}`, `protocol "raft"`},
		{"epoch", `{"format":1,"role":"master","protocol":"autoswitch","epoch":-1}`, "epoch -1"},
		{"broker id", `{"format":1,"role":"slave","protocol":"autoswitch","broker_id":-5}`, "broker id -5"},
		{"two objects", `{"format":1,"role":"slave","protocol":"classic"}{"format":1}`, "data after"},
		{"oversized", `{"format":1,"role":"slave","protocol":"classic","x":"` + strings.Repeat("a", MaxRoleFileBytes) + `"}`, "larger than"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, RoleFileName), []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, ok, err := ReadRoleFile(dir)
		if ok || !errors.Is(err, ErrRoleFile) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), RoleFileName) {
			t.Errorf("%s: ok=%v err=%v, want ErrRoleFile with %q", c.name, ok, err, c.want)
		}
	}
}

// TestRoleFileUnwritable: a write that cannot happen leaves the old file.
func TestRoleFileUnwritable(t *testing.T) {
	dir := t.TempDir()
	if err := WriteRoleFile(dir, RoleRecord{Role: RoleMaster, Protocol: "classic", BrokerID: 1, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// A directory where the temporary file goes makes the write fail.
	if err := os.Mkdir(filepath.Join(dir, RoleFileName+".tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteRoleFile(dir, RoleRecord{Role: RoleSlave, Protocol: "classic", Time: time.Now()}); err == nil {
		t.Fatal("write over a directory succeeded")
	}
	if got, ok, err := ReadRoleFile(dir); !ok || err != nil || got.Role != RoleMaster {
		t.Fatalf("after a failed write: %+v ok=%v err=%v", got, ok, err)
	}
}

func TestNewBrokerID(t *testing.T) {
	seen := map[int64]bool{}
	for range 200 {
		id, err := NewBrokerID()
		if err != nil {
			t.Fatal(err)
		}
		if id < 1 || id > MaxGeneratedBrokerID {
			t.Fatalf("broker id %d outside [1, %d]", id, MaxGeneratedBrokerID)
		}
		seen[id] = true
	}
	if len(seen) < 190 {
		t.Fatalf("only %d distinct ids in 200", len(seen))
	}
}

func TestDivergedRejoinMessage(t *testing.T) {
	msg := DivergedRejoinMessage("/d", RoleRecord{Role: RoleMaster, Protocol: "classic", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	for _, want := range []string{"/d", "last ran as a classic master", "cannot detect", "Re-seed", "--ha-protocol autoswitch", "--allow-diverged-rejoin", "2026-01-02T03:04:05Z"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message does not say %q: %s", want, msg)
		}
	}
}

// FuzzRoleRecord: any file content decodes or is refused with ErrRoleFile;
// what decodes encodes back to a file that decodes the same.
func FuzzRoleRecord(f *testing.F) {
	f.Add([]byte(`{"format":1,"role":"master","protocol":"autoswitch","epoch":3,"broker_id":4711,"time":"2026-12-02T15:05:00.123Z"}` + "\n"))
	f.Add([]byte(`{"format":1,"role":"slave","protocol":"classic"}`))
	f.Add([]byte(`{"format":1,"role":"slave","protocol":"classic","epoch":2147483648}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodeRoleRecord(b)
		if err != nil {
			if !errors.Is(err, ErrRoleFile) {
				t.Fatalf("error without ErrRoleFile: %v", err)
			}
			return
		}
		again, err := DecodeRoleRecord(EncodeRoleRecord(rec))
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", rec, err)
		}
		if again.Role != rec.Role || again.Protocol != rec.Protocol || again.Epoch != rec.Epoch || again.BrokerID != rec.BrokerID {
			t.Fatalf("round trip %+v -> %+v", rec, again)
		}
	})
}

// TestRoleFileDocumented: the example of docs/on-disk-format.md is what
// EncodeRoleRecord writes for it.
func TestRoleFileDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "on-disk-format.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "## Role file")
	if !ok {
		t.Fatal("docs/on-disk-format.md has no Role file section")
	}
	_, block, ok := strings.Cut(after, "```json\n")
	if !ok {
		t.Fatal("the Role file section has no json example")
	}
	example, _, _ := strings.Cut(block, "```")
	rec, err := DecodeRoleRecord([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(EncodeRoleRecord(rec)); got != example {
		t.Fatalf("the documented example is\n%s\nEncodeRoleRecord writes\n%s", example, got)
	}
}
