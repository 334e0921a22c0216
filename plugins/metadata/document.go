package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/replicatorhq/replicator/sdk/meta"
)

// Default document names: RocketMQ's broker config files under DATA/config.
const (
	TopicsName             = "topics.json"
	SubscriptionGroupName  = "subscriptionGroup.json"
	ConsumerOffsetName     = "consumerOffset.json"
	DelayOffsetName        = "delayOffset.json"
	DefaultMaxDocumentSize = 16 << 20 // bytes of a document body (PUT, Apply)
	// DefaultMaxDocuments bounds the number of documents of a store: a
	// RocketMQ broker keeps about ten files in DATA/config.
	DefaultMaxDocuments = 256
	// DefaultMaxTotalSize bounds the sum of a store's document bodies.
	DefaultMaxTotalSize = 64 << 20
	// MaxNameLen is the longest document name: NAME.bak and NAME.tmp must
	// fit the usual 255-byte file-name limit.
	MaxNameLen = 255 - len(".bak")
)

// DefaultDocuments are the RocketMQ documents with the empty bodies a fresh
// broker writes; Options.CreateDefaults creates the missing ones.
var DefaultDocuments = map[string]string{
	TopicsName:            `{"topicConfigTable":{}}`,
	SubscriptionGroupName: `{"subscriptionGroupTable":{}}`,
	ConsumerOffsetName:    `{"offsetTable":{}}`,
	DelayOffsetName:       `{"offsetTable":{}}`,
}

// Errors of this package beside the model's (meta.ErrNotFound,
// meta.ErrInvalidName, meta.ErrInvalidDocument, meta.ErrTooLarge,
// meta.ErrClosed). They are wrapped with context; check them with
// errors.Is.
var (
	// ErrBadResponse: a master answered with something malformed.
	ErrBadResponse = errors.New("metadata: malformed answer from master")
	// ErrLimit: a write would take the store over Options.MaxDocuments or
	// Options.MaxTotalSize; nothing changed.
	ErrLimit = errors.New("metadata: store limit reached")
)

// ValidateName reports, wrapping ErrInvalidName, why name cannot name a
// document, or nil.
func ValidateName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", meta.ErrInvalidName, truncate(name), why) }
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", meta.ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, over the limit of %d", meta.ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case strings.ContainsAny(name, `/\`):
		return bad("contains a path separator")
	case strings.Contains(name, ".."):
		return bad(`contains ".."`)
	case strings.HasPrefix(name, "."):
		return bad(`starts with "."`)
	case strings.HasSuffix(name, tmpSuffix) || strings.HasSuffix(name, bakSuffix):
		return bad(`ends in ".tmp" or ".bak", reserved for the store's own files`)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return bad("contains a control character")
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// DecodeDocument decodes a document as stored in a file or served by GET:
// a JSON object whose optional "dataVersion" member is the version. It
// returns the version and the body, which is the object without
// "dataVersion", keeping the other members' order and bytes. fastjson's
// unquoted integer keys ({0:12}) are accepted and quoted. Errors wrap
// ErrInvalidDocument.
func DecodeDocument(data []byte) (meta.DataVersion, json.RawMessage, error) {
	var v meta.DataVersion
	norm, valid := quoteBareKeys(data)
	if !valid && !json.Valid(norm) {
		return v, nil, fmt.Errorf("%w: not valid JSON", meta.ErrInvalidDocument)
	}
	members, err := objectMembers(norm)
	if err != nil {
		return v, nil, err
	}
	kept := members[:0]
	for _, m := range members {
		if m.key != dataVersionKey {
			kept = append(kept, m)
			continue
		}
		var dv meta.DataVersion
		if err := json.Unmarshal(m.raw, &dv); err != nil {
			return v, nil, fmt.Errorf("%w: dataVersion: %v", meta.ErrInvalidDocument, err)
		}
		v = dv
	}
	return v, buildObject(kept, len(norm)), nil
}

type member struct {
	key string
	raw json.RawMessage
}

// objectMembers splits a JSON object (already valid JSON) into its members,
// in order, keeping each value's bytes.
func objectMembers(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", meta.ErrInvalidDocument, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", meta.ErrInvalidDocument)
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", meta.ErrInvalidDocument, err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: object key is not a string", meta.ErrInvalidDocument)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%w: member %q: %v", meta.ErrInvalidDocument, truncate(key), err)
		}
		out = append(out, member{key: key, raw: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %v", meta.ErrInvalidDocument, err)
	}
	return out, nil
}

// buildObject joins members into a compact JSON object.
func buildObject(members []member, sizeHint int) json.RawMessage {
	body := make([]byte, 0, sizeHint)
	body = append(body, '{')
	for i, m := range members {
		if i > 0 {
			body = append(body, ',')
		}
		body = appendJSONString(body, m.key)
		body = append(body, ':')
		body = append(body, m.raw...)
	}
	return append(body, '}')
}

// EncodeDocument returns the stored form of a document: body (a JSON object
// as returned by DecodeDocument) with "dataVersion" inserted as its first
// member.
func EncodeDocument(v meta.DataVersion, body json.RawMessage) []byte {
	ver, _ := json.Marshal(v) // cannot fail: three int64 fields
	out := make([]byte, 0, len(body)+len(ver)+20)
	out = append(out, `{"dataVersion":`...)
	out = append(out, ver...)
	rest := bytes.TrimSpace(body)
	if len(rest) > 0 && rest[0] == '{' {
		rest = bytes.TrimSpace(rest[1:])
	}
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	if len(rest) == 0 {
		rest = []byte{'}'}
	}
	return append(out, rest...)
}

const dataVersionKey = "dataVersion"

func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// quoteBareKeys returns data with unquoted integer object keys (fastjson's
// {0:12}) quoted. Input that is already valid JSON comes back unchanged with
// valid true; any other input comes back with at most those keys quoted,
// for json.Valid to judge.
func quoteBareKeys(data []byte) (out []byte, valid bool) {
	if json.Valid(data) {
		return data, true
	}
	out = make([]byte, 0, len(data)+16)
	var stack []byte
	expectKey := false
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(data) {
				return append(out, data[i:]...), false
			}
			out = append(out, data[i:j+1]...)
			i = j + 1
			expectKey = false
			continue
		case c == '{' || c == '[':
			stack = append(stack, c)
			expectKey = c == '{'
		case c == '}' || c == ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expectKey = false
		case c == ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1] == '{'
		case c == ':':
			expectKey = false
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case expectKey && (c == '-' || (c >= '0' && c <= '9')):
			j := i + 1
			for j < len(data) && data[j] >= '0' && data[j] <= '9' {
				j++
			}
			if data[j-1] == '-' {
				return append(out, data[i:]...), false
			}
			out = append(out, '"')
			out = append(out, data[i:j]...)
			out = append(out, '"')
			i = j
			expectKey = false
			continue
		default:
			expectKey = false
		}
		out = append(out, c)
		i++
	}
	return out, false
}
