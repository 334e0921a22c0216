package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// MetricNameRE is a replicator metric name.
var MetricNameRE = regexp.MustCompile(`^replicator_[a-z0-9_]+$`)

// metricRefRE finds replicator metric names in text (queries, docs).
var metricRefRE = regexp.MustCompile(`\breplicator_[a-z0-9_]+`)

// MetricRefs returns the replicator_* names mentioned in text; a name that
// ends in _ is a prefix (replicator_ha_), not a metric.
func MetricRefs(text string) []string {
	var out []string
	for _, n := range metricRefRE.FindAllString(text, -1) {
		if !strings.HasSuffix(n, "_") {
			out = append(out, n)
		}
	}
	return out
}

// ScanMetrics finds the Prometheus metric names defined by the Go sources
// under root (test files, testdata, generated protobuf code and hidden
// directories excluded) and returns each with the file that defines it. It
// understands three ways of naming a metric:
//
//   - a string literal that is a whole replicator_* name;
//   - an Opts composite literal with Namespace, Subsystem and Name fields
//     holding string literals or string constants of the package;
//   - a helper that returns such a literal with Name taken from one of its
//     parameters, called with a string literal (core's opts(name, help)).
func ScanMetrics(root string) (map[string]string, error) {
	pkgs := map[string][]*ast.File{} // directory -> files
	fset := token.NewFileSet()
	paths := map[*ast.File]string{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			n := e.Name()
			if p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "proto" && filepath.Base(filepath.Dir(p)) == "sdk" ||
				filepath.Dir(p) == root && (n == "bin" || n == "data")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		paths[f] = filepath.ToSlash(rel)
		pkgs[filepath.Dir(p)] = append(pkgs[filepath.Dir(p)], f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, files := range pkgs {
		scanPackage(files, paths, out)
	}
	return out, nil
}

// helper is a function that builds Opts with Name from parameter index arg.
type helper struct {
	ns, sub string
	arg     int
}

func scanPackage(files []*ast.File, paths map[*ast.File]string, out map[string]string) {
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				return true
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := stringLit(vs.Values[i]); ok {
							consts[name.Name] = v
						}
					}
				}
			}
			return true
		})
	}
	str := func(e ast.Expr) (string, bool) {
		if v, ok := stringLit(e); ok {
			return v, true
		}
		if id, ok := e.(*ast.Ident); ok {
			v, ok := consts[id.Name]
			return v, ok
		}
		return "", false
	}
	helpers := map[string]helper{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if v, ok := stringLit(n); ok && MetricNameRE.MatchString(v) {
					out[v] = paths[f]
				}
			case *ast.FuncDecl:
				if n.Body == nil || n.Type.Params == nil {
					return true
				}
				params := map[string]int{}
				i := 0
				for _, fld := range n.Type.Params.List {
					for _, nm := range fld.Names {
						params[nm.Name] = i
						i++
					}
				}
				ast.Inspect(n.Body, func(m ast.Node) bool {
					cl, ok := m.(*ast.CompositeLit)
					if !ok {
						return true
					}
					fields := keyed(cl)
					if id, ok := fields["Name"].(*ast.Ident); ok {
						if idx, isParam := params[id.Name]; isParam {
							ns, _ := str(fields["Namespace"])
							sub, _ := str(fields["Subsystem"])
							helpers[n.Name.Name] = helper{ns: ns, sub: sub, arg: idx}
						}
					}
					return true
				})
			case *ast.CompositeLit:
				fields := keyed(n)
				name, ok := str(fields["Name"])
				if !ok {
					return true
				}
				ns, _ := str(fields["Namespace"])
				sub, _ := str(fields["Subsystem"])
				if full := fqName(ns, sub, name); MetricNameRE.MatchString(full) {
					out[full] = paths[f]
				}
			}
			return true
		})
	}
	if len(helpers) == 0 {
		return
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id, ok := call.Fun.(*ast.Ident)
			if !ok {
				return true
			}
			h, ok := helpers[id.Name]
			if !ok || h.arg >= len(call.Args) {
				return true
			}
			if name, ok := str(call.Args[h.arg]); ok {
				if full := fqName(h.ns, h.sub, name); MetricNameRE.MatchString(full) {
					out[full] = paths[f]
				}
			}
			return true
		})
	}
}

func keyed(cl *ast.CompositeLit) map[string]ast.Expr {
	m := map[string]ast.Expr{}
	for _, e := range cl.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok {
				m[k.Name] = kv.Value
			}
		}
	}
	return m
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(bl.Value)
	return v, err == nil
}

// fqName joins the non-empty parts with _, as prometheus.BuildFQName.
func fqName(parts ...string) string {
	var nonEmpty []string
	for _, p := range parts {
		if p != "" {
			nonEmpty = append(nonEmpty, p)
		}
	}
	return strings.Join(nonEmpty, "_")
}

// KnownMetric reports whether name is one of known, allowing the series
// suffixes of histograms and summaries (_bucket, _sum, _count).
func KnownMetric(known map[string]string, name string) bool {
	if _, ok := known[name]; ok {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if _, ok := known[base]; ok {
				return true
			}
		}
	}
	return false
}
