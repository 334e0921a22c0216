package pluginhost

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/replicatorhq/replicator/sdk/plugin"
)

// Candidate is an executable found in the plugin directory whose file name
// follows the naming scheme replicator-<kind>-<name>.
type Candidate struct {
	Path string // absolute
	Kind string
	Name string
}

// ChecksumFile is the name of the optional pin file in the plugin
// directory, in sha256sum(1) format ("<64 hex digits>  <file name>" per
// line). When it exists every plugin must be listed in it and match.
const ChecksumFile = "SHA256SUMS"

// ParseName splits a plugin file name replicator-<kind>-<name>[.exe]. ok is
// false for names outside the scheme.
func ParseName(file string) (kind, name string, ok bool) {
	base := strings.TrimSuffix(filepath.Base(file), ".exe")
	rest, ok := strings.CutPrefix(base, "replicator-")
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(rest, "-")
	if !ok {
		return "", "", false
	}
	if (plugin.Info{Kind: kind, Name: name}).Validate() != nil {
		return "", "", false
	}
	return kind, name, true
}

// Discover lists the plugin executables in dir: regular files (or symlinks
// to them) with an execute bit whose names follow the naming scheme,
// sorted by name. Other entries are skipped, and returned as skipped so
// the caller can say so.
func Discover(dir string) (found []Candidate, skipped []string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("pluginhost: plugin directory: %w", err)
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, nil, fmt.Errorf("pluginhost: plugin directory: %w", err)
	}
	for _, e := range ents {
		if e.Name() == ChecksumFile || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(abs, e.Name())
		fi, err := os.Stat(p) // follows symlinks
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			skipped = append(skipped, e.Name())
			continue
		}
		kind, name, ok := ParseName(e.Name())
		if !ok {
			skipped = append(skipped, e.Name())
			continue
		}
		found = append(found, Candidate{Path: p, Kind: kind, Name: name})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Path < found[j].Path })
	return found, skipped, nil
}

// ReadChecksums parses a sha256sum(1)-format file into file name -> digest.
func ReadChecksums(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pluginhost: checksums: %w", err)
	}
	defer f.Close()
	sums := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("pluginhost: %s:%d: want \"<sha256>  <file>\"", path, line)
		}
		sum, err := hex.DecodeString(fields[0])
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("pluginhost: %s:%d: %q is not a SHA-256 digest", path, line, fields[0])
		}
		sums[filepath.Base(strings.TrimPrefix(fields[1], "*"))] = sum
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pluginhost: checksums: %w", err)
	}
	return sums, nil
}
