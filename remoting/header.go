package remoting

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// JSON headers, as fastjson writes a RemotingCommand: members in
// alphabetical order, null members (remark, extFields) left out, the
// language and serialize type by name.
//
//	{"code":21,"extFields":{"k":"v"},"flag":0,"language":"JAVA","opaque":7,
//	 "remark":"...","serializeTypeCurrentRPC":"JSON","version":0}

func appendJSONHeader(dst []byte, c *Command) ([]byte, error) {
	if !c.Language.Known() {
		return dst, fmt.Errorf("%w: language %d has no name for a JSON header", ErrInvalidCommand, byte(c.Language))
	}
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(c.Code), 10)
	if len(c.ExtFields) > 0 {
		dst = append(dst, `,"extFields":{`...)
		for i, k := range sortedKeys(c.ExtFields) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, c.ExtFields[k])
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"flag":`...)
	dst = strconv.AppendInt(dst, int64(c.Flag), 10)
	dst = append(dst, `,"language":"`...)
	dst = append(dst, c.Language.String()...)
	dst = append(dst, `","opaque":`...)
	dst = strconv.AppendInt(dst, int64(c.Opaque), 10)
	if c.Remark != "" {
		dst = append(dst, `,"remark":`...)
		dst = appendString(dst, c.Remark)
	}
	dst = append(dst, `,"serializeTypeCurrentRPC":"JSON","version":`...)
	dst = strconv.AppendInt(dst, int64(c.Version), 10)
	return append(dst, '}'), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendString appends s as a JSON string (invalid UTF-8 becomes U+FFFD, as
// encoding/json does).
func appendString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

type jsonHeader struct {
	Code      *int32            `json:"code"`
	Language  json.RawMessage   `json:"language"`
	Version   int32             `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    *string           `json:"remark"`
	ExtFields map[string]string `json:"extFields"`
}

func decodeJSONHeader(b []byte) (*Command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%w: JSON header: %v", ErrMalformed, err)
	}
	if h.Code == nil {
		return nil, fmt.Errorf("%w: JSON header without a code", ErrMalformed)
	}
	c := &Command{Code: *h.Code, Version: h.Version, Opaque: h.Opaque, Flag: h.Flag}
	if h.Remark != nil {
		c.Remark = *h.Remark
	}
	if len(h.ExtFields) > 0 {
		c.ExtFields = h.ExtFields
	}
	if len(h.Language) > 0 && string(h.Language) != "null" {
		var name string
		var num uint8
		switch {
		case json.Unmarshal(h.Language, &name) == nil:
			l, ok := ParseLanguage(name)
			if !ok {
				l = LanguageOther // a language newer than this list
			}
			c.Language = l
		case json.Unmarshal(h.Language, &num) == nil && LanguageCode(num).Known():
			c.Language = LanguageCode(num) // fastjson also reads an enum from its ordinal
		default:
			return nil, fmt.Errorf("%w: JSON header: language %s", ErrMalformed, truncate(string(h.Language)))
		}
	}
	return c, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ROCKETMQ headers (RocketMQSerializable), big-endian:
//
//	[code i16][language u8][version i16][opaque i32][flag i32]
//	[remark length i32][remark UTF-8]
//	[extFields length i32]{[key length i16][key][value length i32][value]}...

func appendBinaryHeader(dst []byte, c *Command) ([]byte, error) {
	if c.Code < math.MinInt16 || c.Code > math.MaxInt16 {
		return dst, fmt.Errorf("%w: code %d outside int16 for a ROCKETMQ header", ErrInvalidCommand, c.Code)
	}
	if c.Version < math.MinInt16 || c.Version > math.MaxInt16 {
		return dst, fmt.Errorf("%w: version %d outside int16 for a ROCKETMQ header", ErrInvalidCommand, c.Version)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(c.Code)))
	dst = append(dst, byte(c.Language))
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(c.Version)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Opaque))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Flag))
	if len(c.Remark) > MaxHeaderLen {
		return dst, fmt.Errorf("%w: remark of %d bytes", ErrInvalidCommand, len(c.Remark))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Remark)))
	dst = append(dst, c.Remark...)
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, k := range sortedKeys(c.ExtFields) {
		v := c.ExtFields[k]
		if len(k) > math.MaxInt16 {
			return dst, fmt.Errorf("%w: extFields key of %d bytes over int16", ErrInvalidCommand, len(k))
		}
		if len(v) > MaxHeaderLen {
			return dst, fmt.Errorf("%w: extFields value of %d bytes", ErrInvalidCommand, len(v))
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst, nil
}

// binaryFixed is the size of a ROCKETMQ header without remark and fields.
const binaryFixed = 2 + 1 + 2 + 4 + 4 + 4 + 4

func decodeBinaryHeader(b []byte) (*Command, error) {
	if len(b) < binaryFixed {
		return nil, fmt.Errorf("%w: ROCKETMQ header of %d bytes, at least %d", ErrMalformed, len(b), binaryFixed)
	}
	c := &Command{
		Code:     int32(int16(binary.BigEndian.Uint16(b))),
		Language: LanguageCode(b[2]),
		Version:  int32(int16(binary.BigEndian.Uint16(b[3:]))),
		Opaque:   int32(binary.BigEndian.Uint32(b[5:])),
		Flag:     int32(binary.BigEndian.Uint32(b[9:])),
	}
	rest := b[13:]
	remark, rest, err := readString(rest, 4, "remark")
	if err != nil {
		return nil, err
	}
	c.Remark = remark
	if len(rest) < 4 {
		return nil, fmt.Errorf("%w: ROCKETMQ header ends before the extFields length", ErrMalformed)
	}
	n := int64(int32(binary.BigEndian.Uint32(rest)))
	rest = rest[4:]
	if n < 0 || n != int64(len(rest)) {
		return nil, fmt.Errorf("%w: extFields length %d, but %d header bytes remain", ErrMalformed, n, len(rest))
	}
	for len(rest) > 0 {
		var k, v string
		if k, rest, err = readString(rest, 2, "extFields key"); err != nil {
			return nil, err
		}
		if v, rest, err = readString(rest, 4, "extFields value"); err != nil {
			return nil, err
		}
		if c.ExtFields == nil {
			c.ExtFields = make(map[string]string)
		}
		c.ExtFields[k] = v
	}
	return c, nil
}

// readString reads a [length][UTF-8 bytes] string whose length field has
// size bytes (2: int16, 4: int32), bounded by what remains.
func readString(b []byte, size int, what string) (string, []byte, error) {
	if len(b) < size {
		return "", nil, fmt.Errorf("%w: ROCKETMQ header ends in the %s length", ErrMalformed, what)
	}
	var n int64
	if size == 2 {
		n = int64(int16(binary.BigEndian.Uint16(b)))
	} else {
		n = int64(int32(binary.BigEndian.Uint32(b)))
	}
	b = b[size:]
	if n < 0 || n > int64(len(b)) {
		return "", nil, fmt.Errorf("%w: %s length %d, but %d header bytes remain", ErrMalformed, what, n, len(b))
	}
	s := b[:n]
	if !utf8.Valid(s) {
		return "", nil, fmt.Errorf("%w: %s is not UTF-8", ErrMalformed, what)
	}
	return string(s), b[n:], nil
}
