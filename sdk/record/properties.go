package record

import (
	"fmt"
	"slices"
	"strings"
)

// Property separators of RocketMQ's MessageDecoder: each entry is
// key + NameValueSeparator + value + PropertySeparator.
const (
	NameValueSeparator = '\u0001'
	PropertySeparator  = '\u0002'
	// MaxPropertiesSize bounds the encoded properties (an int16 length,
	// RocketMQ's Short.MAX_VALUE check).
	MaxPropertiesSize = 1<<15 - 1
)

// propertiesSize returns the encoded size of p, or an error wrapping
// ErrInvalidProperty.
func propertiesSize(p map[string]string) (int, error) {
	n := 0
	for k, v := range p {
		if k == "" || v == "" {
			return 0, fmt.Errorf("%w: key %q: empty key or value (RocketMQ drops them when parsing)", ErrInvalidProperty, k)
		}
		if strings.ContainsAny(k, "\u0001\u0002") || strings.ContainsAny(v, "\u0001\u0002") {
			return 0, fmt.Errorf("%w: key %q: contains a separator", ErrInvalidProperty, k)
		}
		n += len(k) + len(v) + 2
	}
	if n > MaxPropertiesSize {
		return 0, fmt.Errorf("%w: %w: %d bytes encoded, more than %d", ErrInvalidProperty, ErrTooLarge, n, MaxPropertiesSize)
	}
	return n, nil
}

// sortedKeys returns p's keys in order, in buf when it is large enough.
func sortedKeys(p map[string]string, buf []string) []string {
	keys := buf[:0]
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendProperties appends p's encoding (keys sorted) to dst.
func appendProperties(dst []byte, p map[string]string) []byte {
	if len(p) == 0 {
		return dst
	}
	var buf [32]string
	for _, k := range sortedKeys(p, buf[:]) {
		dst = append(dst, k...)
		dst = append(dst, NameValueSeparator)
		dst = append(dst, p[k]...)
		dst = append(dst, PropertySeparator)
	}
	return dst
}

// EncodeProperties returns RocketMQ's key\u0001value\u0002 encoding of p with
// keys in sorted order (nil for an empty map). The error wraps
// ErrInvalidProperty.
func EncodeProperties(p map[string]string) ([]byte, error) {
	n, err := propertiesSize(p)
	if err != nil || n == 0 {
		return nil, err
	}
	return appendProperties(make([]byte, 0, n), p), nil
}

// ParseProperties decodes RocketMQ's key\u0001value\u0002 list as
// MessageDecoder.string2messageProperties does: an entry is kept only when
// its key and value are both non-empty, a missing final \u0002 is
// tolerated, and a later duplicate key wins. It returns nil when no entry
// is kept.
func ParseProperties(b []byte) map[string]string {
	var m map[string]string
	for len(b) > 0 {
		var item []byte
		if i := indexByte(b, PropertySeparator); i >= 0 {
			item, b = b[:i], b[i+1:]
		} else {
			item, b = b, nil
		}
		if j := indexByte(item, NameValueSeparator); j > 0 && j < len(item)-1 {
			if m == nil {
				m = make(map[string]string, 4)
			}
			m[string(item[:j])] = string(item[j+1:])
		}
	}
	return m
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
