package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfigFile parses arbitrary configuration files and values: Parse never
// panics, and every refusal is a *Error naming where it came from.
func FuzzConfigFile(f *testing.F) {
	f.Add("log_level = \"warn\"\nmaster {\n  segment_size = \"64MiB\"\n  sync_acks = 2\n}\n", "1GiB")
	f.Add("master {\n  segment_size = 1048576\n}\nput {\n  property = [\"a=1\"]\n  json = true\n}\n", "64KiB")
	f.Add("master \"x\" {\n}\n", "7")
	f.Add("master {\n  data = var.x\n}\n", "1.5GiB")
	f.Add("master {\n  tls {\n  }\n}\n", "99999999999TiB")
	f.Add("a = [1, {b = 2}]\n", "")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file, size string) {
		p := filepath.Join(dir, "f.hcl")
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		var o testOpts
		_, err := testProgram(&o).Parse([]string{"--config", p, "master", "--segment-size=" + size}, nil)
		var ce *Error
		if err != nil && !errors.As(err, &ce) {
			t.Fatalf("error %v is not a *config.Error", err)
		}
		if err == nil && (o.seg < 64<<10 || o.seg > 64<<30) {
			t.Fatalf("segment size %d accepted outside its bounds", o.seg)
		}
		if n, err := ParseSize(size); err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", size, n)
		}
	})
}
