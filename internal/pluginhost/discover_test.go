package pluginhost

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPluginParseName(t *testing.T) {
	for _, c := range []struct {
		file, kind, name string
		ok               bool
	}{
		{"replicator-store-commitlog", "store", "commitlog", true},
		{"/x/replicator-metadata-files.exe", "metadata", "files", true},
		{"replicator-transport-tcp-v2", "transport", "tcp-v2", true},
		{"replicator-store-", "", "", false},
		{"replicator-engine-x", "", "", false},
		{"replicator-store-Caps", "", "", false},
		{"other-store-x", "", "", false},
		{"replicator", "", "", false},
	} {
		k, n, ok := ParseName(c.file)
		if k != c.kind || n != c.name || ok != c.ok {
			t.Errorf("ParseName(%q) = %q %q %v", c.file, k, n, ok)
		}
	}
}

// FuzzParseName: never panics; what it accepts rebuilds to the same name.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"replicator-store-commitlog", "replicator-metadata-files.exe", "replicator--", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, n, ok := ParseName(s)
		if ok && filepath.Base(s) != "replicator-"+k+"-"+n && filepath.Base(s) != "replicator-"+k+"-"+n+".exe" {
			t.Fatalf("%q parsed as %q %q", s, k, n)
		}
	})
}

// FuzzReadChecksums: never panics; accepted digests are 32 bytes.
func FuzzReadChecksums(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef  replicator-store-x\n")
	f.Add("# comment\n\nzz  y\n")
	f.Fuzz(func(t *testing.T, s string) {
		p := filepath.Join(t.TempDir(), "SHA256SUMS")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		sums, err := ReadChecksums(p)
		if err != nil {
			return
		}
		for name, sum := range sums {
			if len(sum) != 32 || name == "" {
				t.Fatalf("bad entry %q %x", name, sum)
			}
		}
	})
}
