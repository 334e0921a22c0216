package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Value is the parse target of an option: the standard library's
// flag.Value, so any flag.Value serves. Set parses and stores one textual
// value; it is called once per source that sets the option (and once per
// occurrence for a repeatable option), the later call winning.
type Value = flag.Value

// boolValue is implemented by values that take no argument on the command
// line (--json means --json=true), with the flag package's convention.
type boolValue interface{ IsBoolFlag() bool }

// listValue is implemented by repeatable values: Reset forgets what an
// earlier source set, so a flag replaces the list from the environment
// instead of adding to it.
type listValue interface{ Reset() }

// String parses any string. With nonEmpty set it refuses "".
func String(p *string, nonEmpty bool) Value { return &stringValue{p: p, nonEmpty: nonEmpty} }

type stringValue struct {
	p        *string
	nonEmpty bool
}

func (v *stringValue) Set(s string) error {
	if v.nonEmpty && s == "" {
		return errors.New("must not be empty")
	}
	*v.p = s
	return nil
}
func (v *stringValue) String() string { return *v.p }

// Bool parses true/false, 1/0, yes/no, on/off.
func Bool(p *bool) Value { return &boolVal{p} }

type boolVal struct{ p *bool }

func (v *boolVal) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "yes", "on":
		*v.p = true
	case "false", "0", "no", "off":
		*v.p = false
	default:
		return fmt.Errorf("invalid boolean %q (want true, false, 1, 0, yes, no, on or off)", s)
	}
	return nil
}
func (v *boolVal) String() string   { return strconv.FormatBool(*v.p) }
func (v *boolVal) IsBoolFlag() bool { return true }

// Int parses a decimal integer in [min, max].
func Int(p *int, min, max int) Value { return &intValue{p: p, min: int64(min), max: int64(max)} }

type intValue struct {
	p        *int
	min, max int64
}

func (v *intValue) Set(s string) error {
	n, err := parseBounded(s, v.min, v.max)
	if err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(*v.p) }

// Int64 parses a decimal integer in [min, max].
func Int64(p *int64, min, max int64) Value { return &int64Value{p: p, min: min, max: max} }

type int64Value struct {
	p        *int64
	min, max int64
}

func (v *int64Value) Set(s string) error {
	n, err := parseBounded(s, v.min, v.max)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(*v.p, 10) }

func parseBounded(s string, min, max int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid integer %q", s)
	}
	if n < min || n > max {
		if max == math.MaxInt64 {
			return 0, fmt.Errorf("%d is out of range (want at least %d)", n, min)
		}
		return 0, fmt.Errorf("%d is out of range (want %d to %d)", n, min, max)
	}
	return n, nil
}

// Duration parses a Go duration ("5s", "250ms", "1m30s") in [min, max].
func Duration(p *time.Duration, min, max time.Duration) Value {
	return &durationValue{p: p, min: min, max: max}
}

type durationValue struct {
	p        *time.Duration
	min, max time.Duration
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want a number with a unit, like 5s, 250ms or 1m)", s)
	}
	if d < v.min || d > v.max {
		return fmt.Errorf("duration %s is out of range (want %s to %s)", d, v.min, v.max)
	}
	*v.p = d
	return nil
}
func (v *durationValue) String() string { return v.p.String() }

// Size parses a byte count in [min, max]: a plain number of bytes, or a
// number with a binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB) unit;
// units are case-insensitive.
func Size(p *int64, min, max int64) Value { return &sizeValue{p: p, min: min, max: max} }

// SizeMultiple is Size for sizes that must also be a multiple of mult (a
// page size, say).
func SizeMultiple(p *int64, min, max, mult int64) Value {
	return &sizeValue{p: p, min: min, max: max, mult: mult}
}

type sizeValue struct {
	p        *int64
	min, max int64
	mult     int64 // 0: any
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseSize parses a byte count as Size does, without bounds.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want bytes like 4096, 64KiB, 16MiB or 1GiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// FormatSize renders n with the largest binary unit that divides it exactly.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (v *sizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	if n < v.min || n > v.max {
		return fmt.Errorf("size %s is out of range (want %s to %s)", FormatSize(n), FormatSize(v.min), FormatSize(v.max))
	}
	if v.mult > 0 && n%v.mult != 0 {
		return fmt.Errorf("size %s is not a multiple of %s", FormatSize(n), FormatSize(v.mult))
	}
	*v.p = n
	return nil
}
func (v *sizeValue) String() string { return FormatSize(*v.p) }

// Enum accepts exactly one of choices (case-insensitive; stored as given in
// choices).
func Enum(p *string, choices ...string) Value { return &enumValue{p: p, choices: choices} }

type enumValue struct {
	p       *string
	choices []string
}

func (v *enumValue) Set(s string) error {
	for _, c := range v.choices {
		if strings.EqualFold(s, c) {
			*v.p = c
			return nil
		}
	}
	return fmt.Errorf("invalid value %q (want %s)", s, strings.Join(v.choices, ", "))
}
func (v *enumValue) String() string { return *v.p }

// Addr parses host:port. A listening address may leave the host empty (all
// interfaces) and use port 0 (any free port); a dialled one may not.
func Addr(p *string, listen bool) Value { return &addrValue{p: p, listen: listen} }

type addrValue struct {
	p      *string
	listen bool
}

// CheckAddr validates host:port as Addr does.
func CheckAddr(s string, listen bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("invalid address %q (want host:port, like 127.0.0.1:10911)", s)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("invalid port %q in address %q (want 0 to 65535)", port, s)
	}
	if !listen && n == 0 {
		return fmt.Errorf("address %q needs a port other than 0", s)
	}
	if host == "" {
		if !listen {
			return fmt.Errorf("address %q needs a host", s)
		}
		return nil
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if len(host) > 253 {
		return fmt.Errorf("host name in address %q is too long", s)
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("invalid host name %q in address %q", host, s)
		}
	}
	return nil
}

func (v *addrValue) Set(s string) error {
	if err := CheckAddr(s, v.listen); err != nil {
		return err
	}
	*v.p = s
	return nil
}
func (v *addrValue) String() string { return *v.p }

// URL parses an http or https base URL. A bare host:port means http://host:port.
// The stored form has no trailing slash. With optional set, "" is accepted
// and means "none".
func URL(p *string, optional bool) Value { return &urlValue{p: p, optional: optional} }

type urlValue struct {
	p        *string
	optional bool
}

// NormalizeURL validates and normalises a base URL as URL does.
func NormalizeURL(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("invalid URL %q (want http://host:port)", s)
	}
	if err := CheckAddr(hostPort(u), false); err != nil {
		return "", fmt.Errorf("invalid URL %q: %w", s, err)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

func (v *urlValue) Set(s string) error {
	if v.optional && s == "" {
		*v.p = ""
		return nil
	}
	n, err := NormalizeURL(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}
func (v *urlValue) String() string { return *v.p }

// Dir accepts the path of an existing directory. With optional set, ""
// is accepted and means "none".
func Dir(p *string, optional bool) Value { return &dirValue{p: p, optional: optional} }

type dirValue struct {
	p        *string
	optional bool
}

func (v *dirValue) Set(s string) error {
	if v.optional && s == "" {
		*v.p = ""
		return nil
	}
	fi, err := os.Stat(s)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("directory %q does not exist", s)
		}
		return fmt.Errorf("directory %q: %w", s, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%q is not a directory", s)
	}
	*v.p = s
	return nil
}
func (v *dirValue) String() string { return *v.p }

// File accepts the path of an existing regular file that this process can
// open for reading (certificates, keys, token files). With optional set, ""
// is accepted and means "none".
func File(p *string, optional bool) Value { return &fileValue{p: p, optional: optional} }

type fileValue struct {
	p        *string
	optional bool
}

func (v *fileValue) Set(s string) error {
	if v.optional && s == "" {
		*v.p = ""
		return nil
	}
	if s == "" {
		return errors.New("want a file path")
	}
	f, err := os.Open(s)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("file %q does not exist", s)
		}
		return fmt.Errorf("file %q: %w", s, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("file %q: %w", s, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%q is not a regular file", s)
	}
	*v.p = s
	return nil
}
func (v *fileValue) String() string { return *v.p }

// CSV is a list given as comma-separated items (--ha-allow 10.0.0.1,10.0.0.0/24),
// in repeated flags, in an environment variable, or as an HCL list or string.
// Each item is trimmed and checked by check (nil accepts anything); empty
// items are skipped. A later source replaces the whole list.
func CSV(p *[]string, check func(string) error) Value { return &csvVal{p: p, check: check} }

type csvVal struct {
	p     *[]string
	check func(string) error
}

func (v *csvVal) Set(s string) error {
	for _, it := range strings.Split(s, ",") {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		if v.check != nil {
			if err := v.check(it); err != nil {
				return err
			}
		}
		*v.p = append(*v.p, it)
	}
	return nil
}
func (v *csvVal) String() string { return strings.Join(*v.p, ",") }
func (v *csvVal) Reset()         { *v.p = nil }

// List is a repeatable option: each occurrence adds one item, checked by
// check (nil accepts anything). A later source replaces the whole list.
func List(p *[]string, check func(string) error) Value { return &listVal{p: p, check: check} }

type listVal struct {
	p     *[]string
	check func(string) error
}

func (v *listVal) Set(s string) error {
	if v.check != nil {
		if err := v.check(s); err != nil {
			return err
		}
	}
	*v.p = append(*v.p, s)
	return nil
}
func (v *listVal) String() string { return strings.Join(*v.p, ",") }
func (v *listVal) Reset()         { *v.p = nil }
