package docscheck

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinksResolve: every relative link of every Markdown file points to a
// file or directory of the repository, and an anchor (#...) to a heading of
// the Markdown file it names.
func TestLinksResolve(t *testing.T) {
	files, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]*Doc{}
	load := func(rel string) *Doc {
		if d, ok := docs[rel]; ok {
			return d
		}
		d, err := LoadDoc(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		docs[rel] = d
		return d
	}
	n := 0
	for _, rel := range files {
		d := load(rel)
		for _, l := range d.Links() {
			n++
			target, anchor, _ := strings.Cut(l.Target, "#")
			resolved := rel
			if target != "" {
				resolved = path.Clean(path.Join(path.Dir(rel), target))
				if resolved == ".." || strings.HasPrefix(resolved, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", rel, l.Line, l.Target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(resolved))); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.Line, l.Target, resolved)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			if !load(resolved).Anchors()[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", rel, l.Line, l.Target, resolved, anchor)
			}
		}
	}
	if n == 0 {
		t.Fatal("no links found: the parser is broken")
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Global flags":                  "global-flags",
		"`replicator master`":           "replicator-master",
		"TLS and authentication":        "tls-and-authentication",
		"Upgrade, step by step (4.x)":   "upgrade-step-by-step-4x",
		"Message format v1 (MAGICCODE)": "message-format-v1-magiccode",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}
