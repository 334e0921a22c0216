package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRecordGolden checks two records against bytes written out by hand
// from the format table in doc.go (RocketMQ MessageExtEncoder order).
func TestRecordGolden(t *testing.T) {
	cases := []struct {
		name                  string
		msg                   Message
		queueOff, phys, store int64
		want                  []byte
	}{
		{
			name: "doc example",
			msg:  Message{Topic: "T", QueueID: 1, Body: []byte("hi"), BornTimestamp: 0},
			want: []byte{
				0x00, 0x00, 0x00, 0x5E, // TOTALSIZE 94
				0xDA, 0xA3, 0x20, 0xA7, // MAGICCODE
				0x58, 0x93, 0x2A, 0xAC, // BODYCRC crc32("hi")=0xD8932AAC & 0x7FFFFFFF
				0x00, 0x00, 0x00, 0x01, // QUEUEID 1
				0x00, 0x00, 0x00, 0x00, // FLAG
				0, 0, 0, 0, 0, 0, 0, 0, // QUEUEOFFSET
				0, 0, 0, 0, 0, 0, 0, 0, // PHYSICALOFFSET
				0x00, 0x00, 0x00, 0x00, // SYSFLAG
				0, 0, 0, 0, 0, 0, 0, 0, // BORNTIMESTAMP (0 = store timestamp, here 0)
				0, 0, 0, 0, 0, 0, 0, 0, // BORNHOST 0.0.0.0:0
				0, 0, 0, 0, 0, 0, 0, 0, // STORETIMESTAMP
				0, 0, 0, 0, 0, 0, 0, 0, // STOREHOSTADDRESS 0.0.0.0:0
				0x00, 0x00, 0x00, 0x00, // RECONSUMETIMES
				0, 0, 0, 0, 0, 0, 0, 0, // PREPARED TRANSACTION OFFSET
				0x00, 0x00, 0x00, 0x02, 'h', 'i', // BODY
				0x01, 'T', // TOPIC
				0x00, 0x00, // PROPERTIES length 0
			},
		},
		{
			name: "all fields",
			msg: Message{
				Topic: "TopicTest", QueueID: 3, Flag: 7, Body: []byte("hello"),
				Properties:     map[string]string{"TAGS": "a", "KEYS": "k1"},
				BornTimestamp:  0x0000018C_12345678,
				BornHost:       netip.MustParseAddrPort("10.0.0.1:5000"),
				StoreHost:      netip.MustParseAddrPort("192.168.1.2:10911"),
				ReconsumeTimes: 2, PreparedTransactionOffset: 0x0102030405060708,
			},
			queueOff: 5, phys: 4096, store: 0x0000018C_12345679,
			want: []byte{
				0x00, 0x00, 0x00, 0x78, // TOTALSIZE 120 = 91 + 5 + 9 + 15
				0xDA, 0xA3, 0x20, 0xA7, // MAGICCODE
				0x36, 0x10, 0xA6, 0x86, // BODYCRC crc32("hello") & 0x7FFFFFFF
				0x00, 0x00, 0x00, 0x03, // QUEUEID 3
				0x00, 0x00, 0x00, 0x07, // FLAG 7
				0, 0, 0, 0, 0, 0, 0, 5, // QUEUEOFFSET 5
				0, 0, 0, 0, 0, 0, 0x10, 0, // PHYSICALOFFSET 4096
				0x00, 0x00, 0x00, 0x00, // SYSFLAG
				0, 0, 0x01, 0x8C, 0x12, 0x34, 0x56, 0x78, // BORNTIMESTAMP
				10, 0, 0, 1, 0x00, 0x00, 0x13, 0x88, // BORNHOST 10.0.0.1:5000
				0, 0, 0x01, 0x8C, 0x12, 0x34, 0x56, 0x79, // STORETIMESTAMP
				192, 168, 1, 2, 0x00, 0x00, 0x2A, 0x9F, // STOREHOSTADDRESS 192.168.1.2:10911
				0x00, 0x00, 0x00, 0x02, // RECONSUMETIMES 2
				1, 2, 3, 4, 5, 6, 7, 8, // PREPARED TRANSACTION OFFSET
				0x00, 0x00, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o', // BODY
				0x09, 'T', 'o', 'p', 'i', 'c', 'T', 'e', 's', 't', // TOPIC
				0x00, 0x0F, // PROPERTIES length 15, keys sorted:
				'K', 'E', 'Y', 'S', 0x01, 'k', '1', 0x02,
				'T', 'A', 'G', 'S', 0x01, 'a', 0x02,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Size(&tc.msg)
			if err != nil || n != len(tc.want) {
				t.Fatalf("Size = %d, %v; want %d", n, err, len(tc.want))
			}
			got, err := Encode(nil, &tc.msg, tc.queueOff, tc.phys, tc.store)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("Encode:\n got %x\nwant %x", got, tc.want)
			}
			rec, err := Decode(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.msg
			if want.BornTimestamp == 0 {
				want.BornTimestamp = tc.store
			}
			if !reflect.DeepEqual(rec.Message, want) || rec.QueueOffset != tc.queueOff || rec.PhysicalOffset != tc.phys ||
				rec.StoreTimestamp != tc.store || rec.TotalSize != int32(len(tc.want)) {
				t.Fatalf("Decode = %+v", rec)
			}
		})
	}
}

func randMessage(r *rand.Rand) Message {
	const topicChars = "abcXYZ019%|_-"
	topic := make([]byte, 1+r.Intn(MaxTopicLength))
	for i := range topic {
		topic[i] = topicChars[r.Intn(len(topicChars))]
	}
	m := Message{
		Topic: string(topic), QueueID: r.Int31(), Flag: r.Int31(), SysFlag: r.Int31() &^ (BornHostV6Flag | StoreHostV6Flag),
		BornTimestamp: r.Int63() + 1, ReconsumeTimes: r.Int31(), PreparedTransactionOffset: r.Int63(),
	}
	if n := r.Intn(3000); n > 0 {
		m.Body = make([]byte, n)
		r.Read(m.Body)
	}
	if n := r.Intn(5); n > 0 {
		m.Properties = map[string]string{}
		for i := 0; i < n; i++ {
			m.Properties[strings.Repeat("k", 1+r.Intn(5))+string(rune('a'+i))] = strings.Repeat("v", 1+r.Intn(9))
		}
	}
	switch r.Intn(3) {
	case 1:
		m.BornHost = netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(r.Intn(256)), 1, 2, 3}), uint16(r.Intn(65536)))
		m.StoreHost = netip.AddrPortFrom(netip.AddrFrom4([4]byte{9, 8, 7, byte(r.Intn(256))}), uint16(r.Intn(65536)))
	case 2:
		m.BornHost = netip.MustParseAddrPort("[2001:db8::1]:10911")
		m.SysFlag |= BornHostV6Flag
	}
	return m
}

func TestRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var buf []byte
	for i := 0; i < 2000; i++ {
		m := randMessage(r)
		qo, po, st := r.Int63(), r.Int63(), r.Int63()
		var err error
		buf, err = Encode(buf[:0], &m, qo, po, st)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := Size(&m); n != len(buf) {
			t.Fatalf("Size %d, encoded %d", n, len(buf))
		}
		rec, err := Decode(buf)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !reflect.DeepEqual(rec.Message, m) || rec.QueueOffset != qo || rec.PhysicalOffset != po || rec.StoreTimestamp != st {
			t.Fatalf("case %d: round trip\n got %+v\nwant %+v", i, rec.Message, m)
		}
		info, err := Verify(buf)
		if err != nil || info.Size != int32(len(buf)) || string(info.Topic) != m.Topic || info.QueueID != m.QueueID {
			t.Fatalf("Verify = %+v, %v", info, err)
		}
		// Every strict prefix is torn, never corrupt, never accepted.
		cut := r.Intn(len(buf))
		if _, err := Verify(buf[:cut]); !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d/%d: %v, want ErrShort", cut, len(buf), err)
		}
	}
}

func TestRecordErrors(t *testing.T) {
	m := Message{Topic: "T", Body: []byte("body"), Properties: map[string]string{"a": "b"}}
	good, err := Encode(nil, &m, 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"seven bytes", good[:7], ErrShort},
		{"header only", good[:8], ErrShort},
		{"one short", good[:len(good)-1], ErrShort},
		{"zeros", make([]byte, 200), ErrBadMagic},
		{"bad magic", mut(func(b []byte) { b[5] ^= 1 }), ErrBadMagic},
		{"body flipped", mut(func(b []byte) { b[88] ^= 0x40 }), ErrChecksum},
		{"crc flipped", mut(func(b []byte) { b[9] ^= 1 }), ErrChecksum},
		{"size below min", mut(func(b []byte) { binary.BigEndian.PutUint32(b, 90) }), ErrBadLength},
		{"negative size", mut(func(b []byte) { binary.BigEndian.PutUint32(b, 0x80000000) }), ErrBadLength},
		{"body too long", mut(func(b []byte) { binary.BigEndian.PutUint32(b[84:], 1000) }), ErrBadLength},
		{"negative body", mut(func(b []byte) { binary.BigEndian.PutUint32(b[84:], 0xFFFFFFFF) }), ErrBadLength},
		{"topic too long", mut(func(b []byte) { b[92] = 200 }), ErrBadLength},
		{"props mismatch", mut(func(b []byte) { b[len(b)-5]++ }), ErrBadLength},
		{"size larger than fields", append(mut(func(b []byte) { binary.BigEndian.PutUint32(b, uint32(len(good)+1)) }), 0), ErrBadLength},
		{"v6 flag in small record", mut(func(b []byte) { b[39] |= byte(BornHostV6Flag | StoreHostV6Flag) }), ErrBadLength},
		{"born port above 65535", mut(func(b []byte) { b[52] = 1 }), ErrBadLength},
		{"store port above 65535", mut(func(b []byte) { b[68] = 0x80 }), ErrBadLength},
		{"filler too small", []byte{0, 0, 0, 4, 0xCB, 0xD4, 0x31, 0x94}, ErrBadLength},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			}
			if IsCorrupt(err) == errors.Is(err, ErrShort) {
				t.Fatalf("IsCorrupt(%v) = %v", err, IsCorrupt(err))
			}
		})
	}
}

func TestRecordFiller(t *testing.T) {
	b := make([]byte, 64)
	PutFiller(b, 64)
	if want := []byte{0, 0, 0, 64, 0xCB, 0xD4, 0x31, 0x94}; !bytes.Equal(b[:8], want) {
		t.Fatalf("filler bytes %x, want %x", b[:8], want)
	}
	if n, ok := IsFiller(b); !ok || n != 64 {
		t.Fatalf("IsFiller = %d, %v", n, ok)
	}
	info, err := Verify(b)
	if err != nil || !info.Filler || info.Size != 64 {
		t.Fatalf("Verify = %+v, %v", info, err)
	}
	rec, err := Decode(b)
	if !errors.Is(err, ErrFiller) || rec.TotalSize != 64 {
		t.Fatalf("Decode = %+v, %v", rec, err)
	}
	if _, ok := IsFiller(b[:7]); ok {
		t.Fatal("IsFiller accepted 7 bytes")
	}
}

func TestRecordValidation(t *testing.T) {
	for _, topic := range []string{"", strings.Repeat("a", 128), "a b", "a/b", "topic.x", "é"} {
		if err := ValidateTopic(topic); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("ValidateTopic(%q) = %v", topic, err)
		}
		if _, err := Encode(nil, &Message{Topic: topic}, 0, 0, 0); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("Encode(topic %q) = %v", topic, err)
		}
	}
	for _, topic := range []string{"a", strings.Repeat("a", 127), "%RETRY%group|x_y-Z9"} {
		if err := ValidateTopic(topic); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", topic, err)
		}
	}
	for _, p := range []map[string]string{
		{"": "v"}, {"k": ""}, {"k\u0001": "v"}, {"k": "v\u0002"}, {"k": strings.Repeat("v", MaxPropertiesSize)},
	} {
		dst := make([]byte, 0, 10)
		out, err := Encode(dst, &Message{Topic: "T", Properties: p}, 0, 0, 0)
		if !errors.Is(err, ErrInvalidProperty) || len(out) != 0 {
			t.Errorf("Encode(props %q) = %d bytes, %v", p, len(out), err)
		}
	}
	bad := netip.AddrPortFrom(netip.MustParseAddr("fe80::1%eth0"), 1)
	if _, err := Size(&Message{Topic: "T", BornHost: bad}); err != nil {
		// A zoned IPv6 address is still IPv6 (the zone is not stored).
		t.Errorf("Size(zoned v6) = %v", err)
	}
}

func TestRecordProperties(t *testing.T) {
	p := map[string]string{"b": "2", "a": "1", "c": "x\u0001y"[:1]}
	b, err := EncodeProperties(p)
	if err != nil || string(b) != "a\u00011\u0002b\u00012\u0002c\u0001x\u0002" {
		t.Fatalf("EncodeProperties = %q, %v", b, err)
	}
	if got := ParseProperties(b); !reflect.DeepEqual(got, p) {
		t.Fatalf("ParseProperties = %q", got)
	}
	// RocketMQ's parser: no trailing separator, empty keys or values dropped,
	// value may hold \u0001, later duplicate wins.
	got := ParseProperties([]byte("k\u0001v\u0002\u0001x\u0002e\u0001\u0002noSep\u0002d\u00011\u0002d\u00012\u0002w\u0001a\u0001b"))
	want := map[string]string{"k": "v", "d": "2", "w": "a\u0001b"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseProperties = %q, want %q", got, want)
	}
	if ParseProperties(nil) != nil || ParseProperties([]byte("\u0002\u0002")) != nil {
		t.Fatal("empty properties not nil")
	}
	if b, err := EncodeProperties(nil); b != nil || err != nil {
		t.Fatalf("EncodeProperties(nil) = %q, %v", b, err)
	}
}

func TestRecordEncodeNoAlloc(t *testing.T) {
	m := Message{Topic: "TopicTest", Body: make([]byte, 1024), Properties: map[string]string{"KEYS": "k", "TAGS": "t", "UNIQ_KEY": "u"}}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Encode(buf, &m, 1, 2, 3); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Encode allocated %.1f times per call", allocs)
	}
	rec, _ := Encode(buf, &m, 1, 2, 3)
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := Verify(rec); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Verify allocated %.1f times per call", allocs)
	}
}

func BenchmarkRecordEncode1KiB(b *testing.B) {
	m := Message{Topic: "TopicTest", Body: make([]byte, 1024), Properties: map[string]string{"KEYS": "k", "TAGS": "t"}}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		if _, err := Encode(buf, &m, 1, 2, 3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordVerify1KiB(b *testing.B) {
	m := Message{Topic: "TopicTest", Body: make([]byte, 1024)}
	rec, _ := Encode(nil, &m, 1, 2, 3)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := Verify(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props map[string]string
	}{
		{"with properties", map[string]string{"KEYS": "k1", "TAGS": "t"}},
		{"without properties", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Message{Topic: "TopicTest", Body: []byte("body"), Properties: tc.props}
			rec, err := Encode(nil, &m, 1, 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			info, err := Verify(rec)
			if err != nil {
				t.Fatal(err)
			}
			if TornTail(rec, info) {
				t.Fatal("a whole record reported torn")
			}
			// The last bytes never written: BODYCRC still verifies, the
			// zero tail gives the tear away. Without properties the last
			// written bytes are the topic's (the zero properties length
			// follows it).
			torn := slices.Clone(rec)
			n := 1
			if tc.props == nil {
				n = 3
			}
			clear(torn[len(torn)-n:])
			info, err = Verify(torn)
			if err != nil {
				t.Fatalf("Verify of the torn record: %v (the case TornTail exists for)", err)
			}
			if !TornTail(torn, info) {
				t.Fatal("a record with a zero last byte not reported torn")
			}
		})
	}
}
