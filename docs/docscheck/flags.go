package docscheck

import (
	"fmt"
	"regexp"
	"strings"
)

// HelpFlag is one flag as a --help text prints it.
type HelpFlag struct {
	Name    string
	Default string // "" when none is printed
	Env     string // replicator: the environment variable
}

// DocFlag is a flag row of a documentation table: its first cell starts
// with `--name`.
type DocFlag struct {
	Name string
	Row  []string
}

var (
	docFlagRE   = regexp.MustCompile("^`--([a-z0-9][a-z0-9-]*)")
	goFlagRE    = regexp.MustCompile(`^\s{2}-([a-z0-9][a-z0-9-]*)`)
	goDefaultRE = regexp.MustCompile(`\(default "?(.*?)"?\)\s*$`)
)

// SectionFlags returns the flags of the table rows in the section whose
// heading, without backticks, is title (and whether that section exists).
func SectionFlags(d *Doc, title string) ([]DocFlag, bool) {
	for i, h := range d.Headings {
		if strings.ReplaceAll(h.Text, "`", "") != title {
			continue
		}
		var out []DocFlag
		for _, row := range TableRows(d.Section(i)) {
			if m := docFlagRE.FindStringSubmatch(row[0]); m != nil {
				out = append(out, DocFlag{Name: m[1], Row: row})
			}
		}
		return out, true
	}
	return nil, false
}

// CompareFlags returns the differences between the flags a --help prints
// and those a section documents: flags missing on either side, flags
// printed or documented twice, and defaults that differ (the default is the
// table's second column and must hold the printed default in backticks).
func CompareFlags(doc, section string, help []HelpFlag, documented []DocFlag) []string {
	var out []string
	byName := map[string]DocFlag{}
	for _, f := range documented {
		if _, dup := byName[f.Name]; dup {
			out = append(out, fmt.Sprintf("%s, section %q: --%s is documented twice", doc, section, f.Name))
		}
		byName[f.Name] = f
	}
	inHelp := map[string]bool{}
	for _, f := range help {
		if inHelp[f.Name] {
			out = append(out, fmt.Sprintf("%s: --help prints --%s twice: two options share one flag name", section, f.Name))
		}
		inHelp[f.Name] = true
		df, ok := byName[f.Name]
		if !ok {
			out = append(out, fmt.Sprintf("%s, section %q: --%s (printed by --help) is not documented", doc, section, f.Name))
			continue
		}
		if f.Default != "" && (len(df.Row) < 2 || !strings.Contains(df.Row[1], "`"+f.Default+"`")) {
			got := ""
			if len(df.Row) >= 2 {
				got = df.Row[1]
			}
			out = append(out, fmt.Sprintf("%s, section %q: --%s: the default column should say `%s` (as --help does), not %q", doc, section, f.Name, f.Default, got))
		}
	}
	for _, f := range documented {
		if !inHelp[f.Name] {
			out = append(out, fmt.Sprintf("%s, section %q: --%s is documented but --help does not print it", doc, section, f.Name))
		}
	}
	return out
}

// ParseGoFlagHelp parses the flag list that Go's flag package prints
// ("  -name type" lines, each followed by its usage and "(default X)").
func ParseGoFlagHelp(text string) []HelpFlag {
	var help []HelpFlag
	for _, ln := range strings.Split(text, "\n") {
		if m := goFlagRE.FindStringSubmatch(ln); m != nil {
			help = append(help, HelpFlag{Name: m[1]})
		} else if m := goDefaultRE.FindStringSubmatch(ln); m != nil && len(help) > 0 {
			help[len(help)-1].Default = m[1]
		}
	}
	return help
}
