package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Block is a fenced code block of a Markdown file.
type Block struct {
	Lang string // the info string's first word: sh, console, text, hcl, ...
	Line int    // line number of the opening fence (1-based)
	Text string // the content, without the fences
}

// Heading is a Markdown ATX heading.
type Heading struct {
	Level int
	Text  string // without the #s
	Line  int
}

// Doc is a parsed Markdown file.
type Doc struct {
	Path     string // relative to the repository root, slash-separated
	Lines    []string
	Blocks   []Block
	Headings []Heading
	// Prose is the file with fenced blocks blanked out (line numbers kept).
	Prose []string
}

var fenceRE = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

// ParseDoc parses Markdown text.
func ParseDoc(path, text string) *Doc {
	d := &Doc{Path: path, Lines: strings.Split(text, "\n")}
	d.Prose = make([]string, len(d.Lines))
	var fence string
	var cur *Block
	var body []string
	for i, ln := range d.Lines {
		if cur != nil {
			if strings.HasPrefix(strings.TrimSpace(ln), fence) && strings.Trim(strings.TrimSpace(ln), fence[:1]) == "" {
				cur.Text = strings.Join(body, "\n")
				d.Blocks = append(d.Blocks, *cur)
				cur, body = nil, nil
				continue
			}
			body = append(body, ln)
			continue
		}
		if m := fenceRE.FindStringSubmatch(ln); m != nil {
			fence = m[1]
			cur = &Block{Lang: m[2], Line: i + 1}
			continue
		}
		d.Prose[i] = ln
		if h := headingRE.FindStringSubmatch(ln); h != nil {
			d.Headings = append(d.Headings, Heading{Level: len(h[1]), Text: strings.TrimSpace(h[2]), Line: i + 1})
		}
	}
	return d
}

var headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// Slug is GitHub's anchor for a heading: lower case, punctuation other
// than - and _ removed, spaces turned into -.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of d's headings (duplicates get -1, -2, ...
// as on GitHub).
func (d *Doc) Anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, h := range d.Headings {
		s := Slug(h.Text)
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Section returns the prose lines from the heading at index hi to the next
// heading of the same or a higher level.
func (d *Doc) Section(hi int) []string {
	h := d.Headings[hi]
	end := len(d.Lines)
	for _, n := range d.Headings[hi+1:] {
		if n.Level <= h.Level {
			end = n.Line - 1
			break
		}
	}
	return d.Prose[h.Line:end]
}

// Link is a relative link found in the prose of a Doc.
type Link struct {
	Target string
	Line   int
}

var (
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	linkRE       = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLinkRE    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
)

// Links returns the links of d's prose that are not absolute URLs.
func (d *Doc) Links() []Link {
	var out []Link
	for i, ln := range d.Prose {
		ln = inlineCodeRE.ReplaceAllString(ln, "")
		var targets []string
		for _, m := range linkRE.FindAllStringSubmatch(ln, -1) {
			targets = append(targets, m[1])
		}
		if m := refLinkRE.FindStringSubmatch(ln); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
				continue
			}
			out = append(out, Link{Target: t, Line: i + 1})
		}
	}
	return out
}

// TableRows returns the cells of the Markdown table rows among lines
// (separator rows excluded).
func TableRows(lines []string) [][]string {
	var rows [][]string
	for _, ln := range lines {
		t := strings.TrimSpace(ln)
		if !strings.HasPrefix(t, "|") {
			continue
		}
		cells := splitRow(strings.Trim(t, "|"))
		sep := true
		for _, c := range cells {
			if strings.Trim(strings.TrimSpace(c), ":-") != "" {
				sep = false
			}
		}
		if !sep {
			rows = append(rows, cells)
		}
	}
	return rows
}

// splitRow splits a table row on | outside inline code (and not \|).
func splitRow(s string) []string {
	var cells []string
	var b strings.Builder
	code := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == '|':
			b.WriteByte('|')
			i++
		case c == '`':
			code = !code
			b.WriteByte(c)
		case c == '|' && !code:
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}

// MarkdownFiles lists the repository's Markdown files (relative,
// slash-separated, sorted), skipping hidden directories, build output
// (bin, data) and testdata.
func MarkdownFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" ||
				(filepath.Dir(p) == root && (name == "bin" || name == "data"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// LoadDoc reads and parses root/rel.
func LoadDoc(root, rel string) (*Doc, error) {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	return ParseDoc(rel, string(b)), nil
}

// RepoRoot finds the directory holding go.mod, from dir upwards.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
