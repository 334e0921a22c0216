package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// EnvPrefix starts every environment variable that sets an option.
const EnvPrefix = "REPLICATOR_"

// ErrHelp is returned by Parse when the command line asks for help (-h,
// --help, or the command "help"). Print Usage and exit 0.
var ErrHelp = errors.New("config: help requested")

// Option is one setting: a flag, an HCL key and an environment variable.
type Option struct {
	Name    string // flag name, lower-case words joined by '-': "segment-size"
	Meta    string // placeholder in the help text: "SIZE"; empty for a boolean
	Help    string // one line; the default is appended by the help printer
	Default string // textual default, parsed by Value like any other source; "" = none
	Value   Value
	// Required options must be set by some source.
	Required bool
}

// Key is the option's HCL key: the flag name with '_' for '-'.
func (o *Option) Key() string { return strings.ReplaceAll(o.Name, "-", "_") }

// Command is a sub-command and the options it takes.
type Command struct {
	Name     string
	Synopsis string // one line, for the command list
	Args     string // positional arguments in the usage line, "" for none
	Help     string // paragraphs printed after the usage line
	Options  []*Option
	// MaxArgs is the number of positional arguments allowed: 0 for none,
	// -1 for any.
	MaxArgs int
}

// EnvName is the environment variable of opt in cmd (cmd nil: a global option).
func EnvName(cmd *Command, opt *Option) string {
	name := EnvPrefix
	if cmd != nil {
		name += strings.ToUpper(strings.ReplaceAll(cmd.Name, "-", "_")) + "_"
	}
	return name + strings.ToUpper(opt.Key())
}

// Program is a command-line program: global options and sub-commands.
type Program struct {
	Name     string // "replicator"
	Synopsis string
	Global   []*Option
	Commands []*Command
	// ConfigOption names the global option that holds the configuration file
	// path ("config"). It is read before everything else.
	ConfigOption string
	// Env lists further REPLICATOR_* variables the program reads itself
	// (REPLICATOR_API_TOKEN): Parse accepts them instead of refusing them as
	// unknown, and leaves them alone.
	Env []string
}

// Source says where a value came from.
type Source int

const (
	SourceDefault Source = iota
	SourceFile
	SourceEnv
	SourceFlag
)

func (s Source) String() string {
	return [...]string{"default", "config file", "environment", "flag"}[s]
}

// Result is a parsed command line.
type Result struct {
	Command *Command // nil when only global options were given
	Args    []string // positional arguments
	// Sources records where each option's winning value came from, by
	// option name ("segment-size"); options never set are absent.
	Sources map[string]Source
}

// Error is a refused option value or key. Its message names the key and where
// it came from.
type Error struct {
	Where string // "--segment-size", "REPLICATOR_MASTER_SEGMENT_SIZE", "replicator.hcl:3,3: master.segment_size"
	Err   error
}

func (e *Error) Error() string { return e.Where + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

type flagSetting struct {
	opt   *Option
	value string
	where string
}

// Parse parses args (without the program name) against environ (as
// os.Environ) and the configuration file named by the config option, and
// stores the winning value of every option of the selected command and of the
// global options into their Values. It returns ErrHelp, wrapped in a Result
// that says which command's help was asked for, when help is requested.
//
// The steps run in order, each checking its source before the next one
// runs: the command line (flags, command, arguments), the defaults, the
// configuration file, the environment, the flags, the required options.
func (p *Program) Parse(args []string, environ []string) (*Result, error) {
	res := &Result{Sources: map[string]Source{}}
	flags, err := p.parseArgs(args, res)
	if err != nil {
		return res, err
	}
	env := envMap(environ)
	scope := p.scope(res.Command)
	if err := applyDefaults(scope, res); err != nil {
		return res, err
	}
	if err := p.applyConfigFile(flags, env, res); err != nil {
		return res, err
	}
	if err := p.checkEnv(env); err != nil {
		return res, err
	}
	if err := p.applyEnv(env, res); err != nil {
		return res, err
	}
	if err := p.applyFlags(flags, res); err != nil {
		return res, err
	}
	return res, checkRequired(res.Command, scope, res)
}

// parseArgs reads the command line: global options, then the command, then
// its options and arguments (global options are accepted after the command
// too). It sets res.Command and res.Args and returns the flags in order,
// not yet stored.
func (p *Program) parseArgs(args []string, res *Result) ([]flagSetting, error) {
	flags, i, help, err := p.parseGlobalFlags(args)
	if err != nil {
		return nil, err
	}
	var positional []string
	if i < len(args) && args[i] != "--" {
		cmdFlags, pos, err := p.parseCommand(args[i:], help, res)
		if err != nil {
			return nil, err
		}
		flags, positional = append(flags, cmdFlags...), pos
	} else if i < len(args) {
		positional = append(positional, args[i+1:]...)
	}
	if help {
		return nil, ErrHelp
	}
	if res.Command == nil && len(positional) > 0 {
		return nil, &Error{Where: positional[0], Err: errors.New("unexpected argument")}
	}
	if res.Command != nil && res.Command.MaxArgs >= 0 && len(positional) > res.Command.MaxArgs {
		return nil, &Error{Where: positional[res.Command.MaxArgs], Err: fmt.Errorf("unexpected argument (%s takes %s)", res.Command.Name, argCount(res.Command.MaxArgs))}
	}
	res.Args = positional
	return flags, nil
}

// parseGlobalFlags reads the global flags before the command. It returns
// them, the index of the first argument that is not one, and whether help
// was asked for (-h, --help).
func (p *Program) parseGlobalFlags(args []string) (flags []flagSetting, i int, help bool, err error) {
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, val, hasVal := splitFlag(a)
		if name == "h" || name == "help" {
			help = true
			continue
		}
		opt := find(p.Global, name)
		if opt == nil {
			return nil, i, help, &Error{Where: a, Err: fmt.Errorf("unknown global flag%s", suggest(name, optNames(p.Global), "--"))}
		}
		v, next, err := flagValue(opt, a, val, hasVal, args, i)
		if err != nil {
			return nil, i, help, err
		}
		i = next
		flags = append(flags, flagSetting{opt, v, "--" + opt.Name})
	}
	return flags, i, help, nil
}

// parseCommand reads the command (args[0], or "help COMMAND") and its
// flags and arguments; "--" ends the flags. It sets res.Command.
func (p *Program) parseCommand(args []string, help bool, res *Result) (flags []flagSetting, positional []string, err error) {
	name := args[0]
	if name == "help" {
		help = true
		if len(args) < 2 {
			return nil, nil, ErrHelp
		}
		name = args[1]
	}
	if res.Command = p.command(name); res.Command == nil {
		return nil, nil, &Error{Where: name, Err: fmt.Errorf("unknown command%s (run '%s --help' for the list)", suggest(name, p.commandNames(), ""), p.Name)}
	}
	if help {
		return nil, nil, ErrHelp
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, val, hasVal := splitFlag(a)
		if name == "h" || name == "help" {
			return nil, nil, ErrHelp
		}
		opt := find(res.Command.Options, name)
		if opt == nil {
			opt = find(p.Global, name)
		}
		if opt == nil {
			all := append(optNames(res.Command.Options), optNames(p.Global)...)
			return nil, nil, &Error{Where: a, Err: fmt.Errorf("unknown flag for %s%s", res.Command.Name, suggest(name, all, "--"))}
		}
		v, next, err := flagValue(opt, a, val, hasVal, args, i)
		if err != nil {
			return nil, nil, err
		}
		i = next
		flags = append(flags, flagSetting{opt, v, "--" + opt.Name})
	}
	return flags, positional, nil
}

// envMap is environ (as os.Environ) as a map.
func envMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// scope is the options that cmd (nil: none) takes: the global ones and
// its own.
func (p *Program) scope(cmd *Command) []*Option {
	scope := append([]*Option(nil), p.Global...)
	if cmd != nil {
		scope = append(scope, cmd.Options...)
	}
	return scope
}

// applyDefaults stores the default of every option in scope that has one.
func applyDefaults(scope []*Option, res *Result) error {
	for _, opt := range scope {
		if opt.Default == "" {
			continue
		}
		if err := opt.Value.Set(opt.Default); err != nil {
			return &Error{Where: "default of --" + opt.Name, Err: err}
		}
		res.Sources[opt.Name] = SourceDefault
	}
	return nil
}

// applyConfigFile reads and applies the configuration file named by the
// config option's flag, else by its environment variable; none: nothing.
func (p *Program) applyConfigFile(flags []flagSetting, env map[string]string, res *Result) error {
	if p.ConfigOption == "" {
		return nil
	}
	copt := find(p.Global, p.ConfigOption)
	path := env[EnvName(nil, copt)]
	for _, f := range flags {
		if f.opt == copt {
			path = f.value
		}
	}
	if path == "" {
		return nil
	}
	if err := copt.Value.Set(path); err != nil {
		return &Error{Where: "--" + copt.Name, Err: err}
	}
	res.Sources[copt.Name] = SourceFlag
	src, err := os.ReadFile(path)
	if err != nil {
		return &Error{Where: "--" + copt.Name, Err: fmt.Errorf("reading configuration file: %w", err)}
	}
	return p.applyFile(path, src, res)
}

// checkEnv refuses unknown REPLICATOR_* variables, naming the first (in
// sorted order) and the closest known one.
func (p *Program) checkEnv(env map[string]string) error {
	known := map[string]bool{}
	for _, name := range p.Env {
		known[name] = true
	}
	for _, opt := range p.Global {
		known[EnvName(nil, opt)] = true
	}
	for _, c := range p.Commands {
		for _, opt := range c.Options {
			known[EnvName(c, opt)] = true
		}
	}
	var unknown []string
	for k := range env {
		if strings.HasPrefix(k, EnvPrefix) && !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return &Error{Where: unknown[0], Err: fmt.Errorf("unknown environment variable%s", suggest(unknown[0], slices.Sorted(maps.Keys(known)), ""))}
}

// applyEnv stores the environment's values of the global options (but the
// config option, read before) and of the selected command's.
func (p *Program) applyEnv(env map[string]string, res *Result) error {
	for _, opt := range p.Global {
		if opt.Name == p.ConfigOption {
			continue
		}
		if err := setFromEnv(nil, opt, env, res); err != nil {
			return err
		}
	}
	if res.Command == nil {
		return nil
	}
	for _, opt := range res.Command.Options {
		if err := setFromEnv(res.Command, opt, env, res); err != nil {
			return err
		}
	}
	return nil
}

// setFromEnv stores opt's environment variable when it is set: a list
// option takes comma-separated items and forgets earlier sources.
func setFromEnv(cmd *Command, opt *Option, env map[string]string, res *Result) error {
	name := EnvName(cmd, opt)
	v, ok := env[name]
	if !ok {
		return nil
	}
	if l, ok := opt.Value.(listValue); ok {
		l.Reset()
		for _, item := range strings.Split(v, ",") {
			if err := opt.Value.Set(strings.TrimSpace(item)); err != nil {
				return &Error{Where: name, Err: err}
			}
		}
	} else if err := opt.Value.Set(v); err != nil {
		return &Error{Where: name, Err: err}
	}
	res.Sources[opt.Name] = SourceEnv
	return nil
}

// applyFlags stores the command line's flags in order (the config option
// was read before); the first occurrence of a list flag forgets earlier
// sources, later ones add to it.
func (p *Program) applyFlags(flags []flagSetting, res *Result) error {
	reset := map[*Option]bool{}
	for _, f := range flags {
		if f.opt.Name == p.ConfigOption {
			continue
		}
		if l, ok := f.opt.Value.(listValue); ok && !reset[f.opt] {
			l.Reset()
			reset[f.opt] = true
		}
		if err := f.opt.Value.Set(f.value); err != nil {
			return &Error{Where: f.where, Err: err}
		}
		res.Sources[f.opt.Name] = SourceFlag
	}
	return nil
}

// checkRequired refuses a required option no source set.
func checkRequired(cmd *Command, scope []*Option, res *Result) error {
	for _, opt := range scope {
		if _, set := res.Sources[opt.Name]; opt.Required && !set {
			where := "--" + opt.Name
			if cmd != nil {
				where += " (or " + EnvName(cmd, opt) + ")"
			}
			return &Error{Where: where, Err: errors.New("required")}
		}
	}
	return nil
}

func argCount(n int) string {
	switch n {
	case 0:
		return "no arguments"
	case 1:
		return "one argument"
	}
	return fmt.Sprintf("at most %d arguments", n)
}

// splitFlag splits "--name=value" / "-name" into its parts.
func splitFlag(a string) (name, val string, hasVal bool) {
	a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	name, val, hasVal = strings.Cut(a, "=")
	return name, val, hasVal
}

// flagValue returns the value of the flag at args[i] and the index of the
// last argument it used.
func flagValue(opt *Option, arg, val string, hasVal bool, args []string, i int) (string, int, error) {
	if hasVal {
		return val, i, nil
	}
	if b, ok := opt.Value.(boolValue); ok && b.IsBoolFlag() {
		return "true", i, nil
	}
	if i+1 >= len(args) {
		return "", i, &Error{Where: arg, Err: fmt.Errorf("missing value (want --%s %s)", opt.Name, opt.Meta)}
	}
	return args[i+1], i + 1, nil
}

func find(opts []*Option, name string) *Option {
	for _, o := range opts {
		if o.Name == name {
			return o
		}
	}
	return nil
}

func optNames(opts []*Option) []string {
	var names []string
	for _, o := range opts {
		names = append(names, o.Name)
	}
	return names
}

func (p *Program) command(name string) *Command {
	for _, c := range p.Commands {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (p *Program) commandNames() []string {
	var names []string
	for _, c := range p.Commands {
		names = append(names, c.Name)
	}
	return names
}

// suggest returns ` (did you mean "X"?)` for the closest candidate, or "".
func suggest(given string, candidates []string, prefix string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := distance(strings.ToLower(given), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", prefix+best)
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
