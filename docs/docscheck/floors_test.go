package docscheck

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/replicatorhq/replicator/"

// floorsExempt are the packages the floors do not cover: programs (plugin
// binaries, examples, the interop and fault harnesses) and the docs' own
// checks, which may import anything.
func floorsExempt(pkg string) bool {
	for _, p := range []string{"examples/", "interop", "faults", "docs/"} {
		if strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return strings.Contains(pkg, "/cmd/") || strings.HasPrefix(pkg, "cmd/") && pkg != "cmd/replicator"
}

// besideOK are the same-floor imports docs/architecture.md names ("beside
// it").
var besideOK = map[[2]string]bool{
	{"plugins/metadata", "remoting"}:              true,
	{"sdk/internal/grpcopt", "internal/grpcpool"}: true,
}

// floorTable reads docs/architecture.md's Floors table: package → floor,
// and for an entry "dir/*", dir and every package under it → floor.
func floorTable(t *testing.T) (exact map[string]int, prefix map[string]int) {
	t.Helper()
	d, err := LoadDoc(root, "docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	hi := -1
	for i, h := range d.Headings {
		if h.Text == "Floors" {
			hi = i
		}
	}
	if hi < 0 {
		t.Fatal(`docs/architecture.md has no "Floors" heading`)
	}
	exact, prefix = map[string]int{}, map[string]int{}
	code := regexp.MustCompile("`([^`]+)`")
	brace := regexp.MustCompile(`^(.*)\{([^}]*)\}(.*)$`)
	for _, row := range TableRows(d.Section(hi)) {
		if len(row) < 2 {
			continue
		}
		n, err := strconv.Atoi(strings.Fields(row[0] + " x")[0])
		if err != nil {
			continue // the header row
		}
		for _, m := range code.FindAllStringSubmatch(row[1], -1) {
			names := []string{m[1]}
			if b := brace.FindStringSubmatch(m[1]); b != nil {
				names = names[:0]
				for _, part := range strings.Split(b[2], ",") {
					names = append(names, b[1]+part+b[3])
				}
			}
			for _, name := range names {
				if p, ok := strings.CutSuffix(name, "/*"); ok {
					prefix[p+"/"] = n
				} else {
					exact[name] = n
				}
			}
		}
	}
	if len(exact) < 20 {
		t.Fatalf("the Floors table of docs/architecture.md gave %d packages: the parser is broken", len(exact))
	}
	return exact, prefix
}

// TestArchitectureFloors: every package of the module (programs and the
// docs' checks aside) is on a floor of docs/architecture.md's table, and
// imports only packages of lower floors (or one the page names beside it).
func TestArchitectureFloors(t *testing.T) {
	exact, prefix := floorTable(t)
	floor := func(pkg string) (int, bool) {
		if n, ok := exact[pkg]; ok {
			return n, true
		}
		for p, n := range prefix {
			if strings.HasPrefix(pkg+"/", p) {
				return n, true
			}
		}
		return 0, false
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, "|")
		pkg = strings.TrimPrefix(pkg, modulePath)
		if floorsExempt(pkg) {
			continue
		}
		pf, ok := floor(pkg)
		if !ok {
			t.Errorf("package %s is on no floor of docs/architecture.md's table: add it", pkg)
			continue
		}
		for _, imp := range strings.Fields(imports) {
			dep, ok := strings.CutPrefix(imp, modulePath)
			if !ok {
				continue
			}
			checked++
			df, ok := floor(dep)
			switch {
			case !ok:
				t.Errorf("package %s (imported by %s) is on no floor of docs/architecture.md's table: add it", dep, pkg)
			case df > pf || df == pf && !besideOK[[2]string{pkg, dep}]:
				t.Errorf("%s (floor %d) imports %s (floor %d): a package imports only lower floors", pkg, pf, dep, df)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d imports between the module's packages: go list's output did not parse", checked)
	}
}
