package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/docs/docscheck"
)

var commandRE = regexp.MustCompile(`^\s{2}kvstore ([a-z]+)\s`)

// TestREADMEDocumentsEveryFlag: README.md has a section per command of
// `kvstore --help` whose flag table is exactly what `kvstore COMMAND --help`
// prints, with the same defaults. (make docs-check runs the README's
// commands.)
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	doc, err := docscheck.LoadDoc(".", "README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, out := cli(t, "--help")
	var cmds []string
	for _, ln := range strings.Split(out, "\n") {
		if m := commandRE.FindStringSubmatch(ln); m != nil {
			cmds = append(cmds, m[1])
		}
	}
	if len(cmds) < 6 {
		t.Fatalf("kvstore --help lists only %v", cmds)
	}
	for _, c := range cmds {
		code, help := cli(t, c, "--help")
		if code != exitOK {
			t.Fatalf("kvstore %s --help: exit %d", c, code)
		}
		title := "kvstore " + c
		flags, ok := docscheck.SectionFlags(doc, title)
		if !ok {
			t.Errorf("README.md: no section titled `%s`", title)
			continue
		}
		for _, p := range docscheck.CompareFlags("README.md", title, docscheck.ParseGoFlagHelp(help), flags) {
			t.Error(p)
		}
	}
}
