package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// MaxFileSize bounds the configuration file read by Parse.
const MaxFileSize = 1 << 20

// applyFile parses an HCL configuration file: global options as top-level
// attributes, command options in one block per command. Every block is
// checked; only the global attributes and the selected command's block are
// kept (the others are checked against scratch copies of their values).
func (p *Program) applyFile(path string, src []byte, res *Result) error {
	if len(src) > MaxFileSize {
		return &Error{Where: path, Err: fmt.Errorf("configuration file is larger than %d bytes", MaxFileSize)}
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		where := path
		if d := diags[0]; d.Subject != nil {
			where = strings.TrimSuffix(rangeText(*d.Subject), ": ")
		}
		return &Error{Where: where, Err: errors.New(diagText(diags))}
	}
	body := f.Body.(*hclsyntax.Body)
	if err := p.applyGlobalAttrs(body.Attributes, res); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, blk := range body.Blocks {
		if err := p.applyBlock(blk, seen, res); err != nil {
			return err
		}
	}
	return nil
}

// applyGlobalAttrs stores the file's top-level attributes: global options
// (but the config option).
func (p *Program) applyGlobalAttrs(attrs hclsyntax.Attributes, res *Result) error {
	for _, name := range sortedAttrs(attrs) {
		attr := attrs[name]
		var opt *Option
		for _, o := range p.Global {
			if o.Key() == name && o.Name != p.ConfigOption {
				opt = o
			}
		}
		if opt == nil {
			var keys []string
			for _, o := range p.Global {
				if o.Name != p.ConfigOption {
					keys = append(keys, o.Key())
				}
			}
			return &Error{Where: rangeText(attr.NameRange) + name, Err: fmt.Errorf("unknown key%s", suggest(name, append(keys, p.commandNames()...), ""))}
		}
		if err := setAttr(opt, attr, name); err != nil {
			return err
		}
		res.Sources[opt.Name] = SourceFile
	}
	return nil
}

// applyBlock checks one command block (seen: the blocks before it) and
// stores its values when it is the selected command's.
func (p *Program) applyBlock(blk *hclsyntax.Block, seen map[string]bool, res *Result) error {
	cmd := p.command(blk.Type)
	switch {
	case cmd == nil || len(cmd.Options) == 0:
		return &Error{Where: rangeText(blk.TypeRange) + blk.Type, Err: fmt.Errorf("unknown block%s", suggest(blk.Type, p.commandNames(), ""))}
	case len(blk.Labels) > 0:
		return &Error{Where: rangeText(blk.LabelRanges[0]) + blk.Type, Err: errors.New("a command block takes no label")}
	case seen[blk.Type]:
		return &Error{Where: rangeText(blk.TypeRange) + blk.Type, Err: errors.New("block given twice")}
	case len(blk.Body.Blocks) > 0:
		b := blk.Body.Blocks[0]
		return &Error{Where: rangeText(b.TypeRange) + blk.Type + "." + b.Type, Err: errors.New("unknown block")}
	}
	seen[blk.Type] = true
	selected := res.Command != nil && res.Command.Name == cmd.Name
	for _, name := range sortedAttrs(blk.Body.Attributes) {
		attr := blk.Body.Attributes[name]
		opt := findKey(cmd.Options, name)
		where := blk.Type + "." + name
		if opt == nil {
			var ks []string
			for _, o := range cmd.Options {
				ks = append(ks, o.Key())
			}
			return &Error{Where: rangeText(attr.NameRange) + where, Err: fmt.Errorf("unknown key%s", suggest(name, ks, ""))}
		}
		if !selected {
			// Check the value without keeping it.
			opt = &Option{Name: opt.Name, Value: scratch(opt.Value)}
		}
		if err := setAttr(opt, attr, where); err != nil {
			return err
		}
		if selected {
			res.Sources[opt.Name] = SourceFile
		}
	}
	return nil
}

// scratch returns a Value of the same kind as v that stores elsewhere.
func scratch(v Value) Value {
	switch t := v.(type) {
	case *stringValue:
		return &stringValue{p: new(string), nonEmpty: t.nonEmpty}
	case *boolVal:
		return &boolVal{p: new(bool)}
	case *intValue:
		return &intValue{p: new(int), min: t.min, max: t.max}
	case *int64Value:
		return &int64Value{p: new(int64), min: t.min, max: t.max}
	case *durationValue:
		return &durationValue{p: new(time.Duration), min: t.min, max: t.max}
	case *sizeValue:
		return &sizeValue{p: new(int64), min: t.min, max: t.max, mult: t.mult}
	case *enumValue:
		return &enumValue{p: new(string), choices: t.choices}
	case *addrValue:
		return &addrValue{p: new(string), listen: t.listen}
	case *urlValue:
		return &urlValue{p: new(string), optional: t.optional}
	case *dirValue:
		return &dirValue{p: new(string), optional: t.optional}
	case *listVal:
		return &listVal{p: new([]string), check: t.check}
	}
	return discard{}
}

// discard accepts anything; it stands in for Value types this package does
// not know.
type discard struct{}

func (discard) Set(string) error { return nil }
func (discard) String() string   { return "" }

func findKey(opts []*Option, key string) *Option {
	for _, o := range opts {
		if o.Key() == key {
			return o
		}
	}
	return nil
}

func sortedAttrs(attrs hclsyntax.Attributes) []string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	// Report the first problem in file order.
	sort.Slice(names, func(i, j int) bool {
		return attrs[names[i]].SrcRange.Start.Byte < attrs[names[j]].SrcRange.Start.Byte
	})
	return names
}

// setAttr evaluates a literal attribute (no variables or functions) and sets
// it: strings, numbers and booleans as their text, a list of those for a
// repeatable option.
func setAttr(opt *Option, attr *hclsyntax.Attribute, where string) error {
	where = rangeText(attr.NameRange) + where
	val, diags := attr.Expr.Value(nil)
	if diags.HasErrors() {
		return &Error{Where: where, Err: errors.New(diagText(diags))}
	}
	if l, ok := opt.Value.(listValue); ok {
		l.Reset()
		if val.Type().IsTupleType() || val.Type().IsListType() {
			if val.IsNull() || !val.IsKnown() {
				return &Error{Where: where, Err: errors.New("want a list of strings")}
			}
			for it := val.ElementIterator(); it.Next(); {
				_, ev := it.Element()
				s, err := scalarText(ev)
				if err != nil {
					return &Error{Where: where, Err: err}
				}
				if err := opt.Value.Set(s); err != nil {
					return &Error{Where: where, Err: err}
				}
			}
			return nil
		}
	}
	s, err := scalarText(val)
	if err != nil {
		return &Error{Where: where, Err: err}
	}
	if err := opt.Value.Set(s); err != nil {
		return &Error{Where: where, Err: err}
	}
	return nil
}

func scalarText(v cty.Value) (string, error) {
	if v.IsNull() || !v.IsKnown() {
		return "", errors.New("want a value, not null")
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), nil
	case cty.Bool:
		if v.True() {
			return "true", nil
		}
		return "false", nil
	case cty.Number:
		bf := v.AsBigFloat()
		if bf.IsInt() {
			i, _ := bf.Int(nil)
			return i.String(), nil
		}
		return bf.Text('f', -1), nil
	}
	return "", fmt.Errorf("want a string, number or boolean, not %s", v.Type().FriendlyName())
}

func rangeText(r hcl.Range) string {
	return fmt.Sprintf("%s:%d,%d: ", r.Filename, r.Start.Line, r.Start.Column)
}

// diagText is the first error of diags; its position is reported by the caller.
func diagText(diags hcl.Diagnostics) string {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			if d.Detail != "" {
				return d.Summary + ": " + d.Detail
			}
			return d.Summary
		}
	}
	return "invalid configuration"
}
