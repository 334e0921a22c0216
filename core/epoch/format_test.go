package epoch

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"strings"
	"testing"
)

// want builds the expected file text by hand: the count, the CRC computed
// here with hash/crc32 directly on the literal entry text, the entry text.
func want(count int, entryText string) string {
	crc := crc32.ChecksumIEEE([]byte(entryText)) & 0x7FFFFFFF
	return fmt.Sprintf("%d\n%d\n%s", count, crc, entryText)
}

func TestEncodeBytes(t *testing.T) {
	cases := []struct {
		name string
		in   []Entry
		want string
	}{
		{"empty", nil, "0\n0\n"},
		{"one at zero", []Entry{{Epoch: 1, StartOffset: 0}}, want(1, "1-0\n")},
		{"two", []Entry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 4096}}, want(2, "1-0\n2-4096\n")},
		{"end offsets not stored", []Entry{{Epoch: 3, StartOffset: 10, EndOffset: 99}, {Epoch: 9, StartOffset: 99, EndOffset: Unbounded}}, want(2, "3-10\n9-99\n")},
		{"extremes", []Entry{{Epoch: 0, StartOffset: 0}, {Epoch: math.MaxInt32, StartOffset: math.MaxInt64}},
			want(2, "0-0\n2147483647-9223372036854775807\n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(Encode(c.in)); got != c.want {
				t.Fatalf("Encode = %q, want %q", got, c.want)
			}
		})
	}
}

// RocketMQ's own example in CheckpointFile.java's comment.
func TestEncodeRocketMQExample(t *testing.T) {
	const file = "2\n773307083\n7-7000\n8-8000\n"
	es := []Entry{{Epoch: 7, StartOffset: 7000}, {Epoch: 8, StartOffset: 8000}}
	if got := string(Encode(es)); got != file {
		t.Fatalf("Encode = %q, want %q", got, file)
	}
	got, err := Decode([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	wantEs := []Entry{{7, 7000, 8000}, {8, 8000, Unbounded}}
	if !reflect.DeepEqual(got, wantEs) {
		t.Fatalf("Decode = %+v, want %+v", got, wantEs)
	}
}

func TestEncodeMasksCRC(t *testing.T) {
	// Find an entry text whose unmasked CRC has the top bit set, so that
	// the mask matters; the CRC line must then differ from the raw value.
	for i := 0; i < 1000; i++ {
		text := fmt.Sprintf("1-%d\n", i)
		raw := crc32.ChecksumIEEE([]byte(text))
		if raw&0x80000000 == 0 {
			continue
		}
		got := string(Encode([]Entry{{Epoch: 1, StartOffset: int64(i)}}))
		if want := fmt.Sprintf("1\n%d\n%s", raw&0x7FFFFFFF, text); got != want {
			t.Fatalf("Encode = %q, want %q (raw crc %d)", got, want, raw)
		}
		return
	}
	t.Fatal("no entry with the CRC's top bit set in 1000 tries")
}

func TestDecodeValid(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []Entry
	}{
		{"empty list", "0\n0\n", []Entry{}},
		{"one", want(1, "5-100\n"), []Entry{{5, 100, Unbounded}}},
		{"crc 0 not checked", "2\n0\n1-0\n3-50\n", []Entry{{1, 0, 50}, {3, 50, Unbounded}}},
		{"equal starts (an epoch that wrote nothing)", want(3, "1-0\n2-50\n3-50\n"), []Entry{{1, 0, 50}, {2, 50, 50}, {3, 50, Unbounded}}},
		{"epoch gaps", want(2, "1-0\n7-10\n"), []Entry{{1, 0, 10}, {7, 10, Unbounded}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Decode = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good := want(2, "1-0\n2-50\n")
	cases := []struct {
		name string
		in   string
	}{
		{"zero bytes", ""},
		{"count only", "2\n"},
		{"count without newline", "2"},
		{"no entries for count", want(2, "")},
		{"fewer entries than count", want(3, "1-0\n2-50\n")},
		{"fewer entries than count, long lines", want(2, "1-123456\n")},
		{"more entries than count", want(1, "1-0\n2-50\n")},
		{"crc mismatch", strings.Replace(good, "2-50", "2-51", 1)},
		{"wrong crc value", "2\n12345\n1-0\n2-50\n"},
		{"crc above mask", "1\n2147483648\n1-0\n"},
		{"negative count", "-1\n0\n"},
		{"count above MaxEntries", fmt.Sprintf("%d\n0\n", MaxEntries+1)},
		{"absurd count", "99999999999999999999\n0\n1-0\n"},
		{"count larger than bytes can hold", "1000\n0\n1-0\n"},
		{"non-numeric count", "x\n0\n"},
		{"count with sign", "+1\n0\n1-0\n"},
		{"count with leading zero", "01\n0\n1-0\n"},
		{"missing final newline", strings.TrimSuffix(good, "\n")},
		{"crlf", strings.ReplaceAll(good, "\n", "\r\n")},
		{"blank entry line", "2\n0\n1-0\n\n2-50\n"},
		{"trailing blank line", "1\n0\n1-0\n\n"},
		{"no dash", "1\n0\n10\n"},
		{"two dashes", "1\n0\n1-0-0\n"},
		{"negative epoch", "1\n0\n-1-0\n"},
		{"negative start", "1\n0\n1--5\n"},
		{"epoch above int32", "1\n0\n2147483648-0\n"},
		{"start above int64", "1\n0\n1-9223372036854775808\n"},
		{"leading zero epoch", "1\n0\n01-0\n"},
		{"space", "1\n0\n1- 0\n"},
		{"empty epoch", "1\n0\n-0\n"},
		{"empty start", "1\n0\n1-\n"},
		{"epochs descending", want(2, "2-0\n1-50\n")},
		{"epochs equal", want(2, "1-0\n1-50\n")},
		{"starts decreasing", want(2, "1-50\n2-0\n")},
		{"overlong line", "1\n0\n" + strings.Repeat("1", 40) + "-0\n"},
		{"oversized file", "1\n0\n" + strings.Repeat("9", MaxFileSize)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es, err := Decode([]byte(c.in))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode(%.60q) = %+v, %v; want ErrCorrupt", c.in, es, err)
			}
		})
	}
}

func TestDecodeEncodeRoundTrip(t *testing.T) {
	es := []Entry{{1, 0, 0}, {2, 0, 0}, {4, 1 << 40, 0}, {math.MaxInt32, math.MaxInt64, 0}}
	got, err := Decode(Encode(es))
	if err != nil {
		t.Fatal(err)
	}
	wantEs := []Entry{{1, 0, 0}, {2, 0, 1 << 40}, {4, 1 << 40, math.MaxInt64}, {math.MaxInt32, math.MaxInt64, Unbounded}}
	if !reflect.DeepEqual(got, wantEs) {
		t.Fatalf("got %+v, want %+v", got, wantEs)
	}
}

func TestWithEnd(t *testing.T) {
	in := []Entry{{1, 0, 0}, {2, 100, 0}, {3, 300, Unbounded}}
	got := WithEnd(in, 450)
	wantEs := []Entry{{1, 0, 100}, {2, 100, 300}, {3, 300, 450}}
	if !reflect.DeepEqual(got, wantEs) {
		t.Fatalf("WithEnd = %+v, want %+v", got, wantEs)
	}
	if in[2].EndOffset != Unbounded || in[0].EndOffset != 0 {
		t.Fatalf("WithEnd changed its input: %+v", in)
	}
	// A max below the last start clamps to the start: never an end
	// before a start.
	if got := WithEnd(in, 200); got[2].EndOffset != 300 {
		t.Fatalf("WithEnd(200) last = %+v, want end 300", got[2])
	}
	if got := WithEnd(nil, 5); len(got) != 0 {
		t.Fatalf("WithEnd(nil) = %+v", got)
	}
}

func TestConsistentPoint(t *testing.T) {
	type es = []Entry
	cases := []struct {
		name          string
		local, master es
		localMax      int64
		masterMax     int64
		want          int64
	}{
		{"identical", es{{1, 0, 0}, {2, 100, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 500, 500, 500},
		{"local behind in same epoch", es{{1, 0, 0}, {2, 100, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 300, 500, 300},
		{"local ahead in same epoch (master lost bytes)", es{{1, 0, 0}, {2, 100, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 800, 500, 500},
		// The scenario: old master M wrote epoch 1 to 150, the
		// slave had 100; the slave became master of epoch 2 at 100.
		{"old master diverged (master longer)", es{{1, 0, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 150, 300, 100},
		{"old master diverged (local longer)", es{{1, 0, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 900, 300, 100},
		{"local has a newer epoch the master lacks", es{{1, 0, 0}, {2, 100, 0}, {3, 200, 0}}, es{{1, 0, 0}, {2, 100, 0}, {4, 150, 0}}, 260, 400, 150},
		{"same epoch different starts: go lower", es{{1, 0, 0}, {2, 120, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 200, 300, 100},
		{"same epochs all different starts", es{{1, 10, 0}, {2, 120, 0}}, es{{1, 0, 0}, {2, 100, 0}}, 200, 300, -1},
		{"no common epoch", es{{1, 0, 0}, {3, 50, 0}}, es{{2, 0, 0}, {4, 50, 0}}, 100, 100, -1},
		{"local empty", es{}, es{{1, 0, 0}}, 0, 100, -1},
		{"master empty", es{{1, 0, 0}}, es{}, 100, 0, -1},
		{"both empty", nil, nil, 0, 0, -1},
		{"empty epoch shared", es{{1, 0, 0}, {2, 100, 0}}, es{{1, 0, 0}, {2, 100, 0}, {3, 100, 0}}, 100, 250, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ConsistentPoint(WithEnd(c.local, c.localMax), WithEnd(c.master, c.masterMax))
			if got != c.want {
				t.Fatalf("ConsistentPoint = %d, want %d", got, c.want)
			}
		})
	}
}

// A master list in any order (it comes off the network) gives the same
// answer; the local walk is by descending epoch, not by position.
func TestConsistentPointUnordered(t *testing.T) {
	local := WithEnd([]Entry{{1, 0, 0}, {2, 100, 0}, {3, 200, 0}}, 260)
	master := WithEnd([]Entry{{1, 0, 0}, {2, 100, 0}, {4, 150, 0}}, 400)
	rev := func(es []Entry) []Entry {
		out := make([]Entry, len(es))
		for i, e := range es {
			out[len(es)-1-i] = e
		}
		return out
	}
	if got := ConsistentPoint(rev(local), rev(master)); got != 150 {
		t.Fatalf("ConsistentPoint(reversed) = %d, want 150", got)
	}
}
