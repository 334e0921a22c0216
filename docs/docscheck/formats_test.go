package docscheck

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
)

var hexLineRE = regexp.MustCompile(`^([0-9a-f]{4})  ((?:[0-9a-f]{2} ?)+)$`)

// TestOnDiskFormatExampleRecord encodes the example message of
// docs/on-disk-format.md with sdk/record and compares the bytes with the
// dump printed there.
func TestOnDiskFormatExampleRecord(t *testing.T) {
	d, err := LoadDoc(root, "docs/on-disk-format.md")
	if err != nil {
		t.Fatal(err)
	}
	var dump []byte
	for _, b := range d.Blocks {
		if !strings.HasPrefix(b.Text, "0000  ") {
			continue
		}
		for _, ln := range strings.Split(strings.TrimSpace(b.Text), "\n") {
			m := hexLineRE.FindStringSubmatch(ln)
			if m == nil {
				t.Fatalf("on-disk-format.md: bad dump line %q", ln)
			}
			raw, err := hex.DecodeString(strings.ReplaceAll(m[2], " ", ""))
			if err != nil {
				t.Fatal(err)
			}
			dump = append(dump, raw...)
		}
	}
	if len(dump) == 0 {
		t.Fatal("docs/on-disk-format.md has no hex dump block")
	}
	msg := &record.Message{
		Topic: "TopicTest", Body: []byte("hello"), Properties: map[string]string{"TAGS": "TagA"},
		BornTimestamp: 1700000000000,
		BornHost:      netip.MustParseAddrPort("10.0.0.1:5000"),
		StoreHost:     netip.MustParseAddrPort("10.0.0.2:10911"),
	}
	got, err := record.Encode(nil, msg, 0, 0, 1700000000001)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, dump) {
		t.Errorf("docs/on-disk-format.md's example record differs from sdk/record's encoding:\ndoc:  %x\ncode: %x", dump, got)
	}
	if !strings.Contains(strings.Join(d.Lines, "\n"), "115 bytes") || len(got) != 115 {
		t.Errorf("the record is %d bytes; the text says 115", len(got))
	}
}

// TestFormatConstantsInDocs: the magic numbers and sizes the format docs
// print are the code's.
func TestFormatConstantsInDocs(t *testing.T) {
	disk := readFile(t, "docs/on-disk-format.md")
	proto := readFile(t, "docs/protocol.md")
	for _, c := range []struct {
		text, want string
	}{
		{disk, "0x" + strings.ToUpper(hex.EncodeToString(be32(record.MagicCode)))},
		{disk, "0x" + strings.ToUpper(hex.EncodeToString(be32(record.BlankMagic)))},
		{proto, "32 KiB"},
		{proto, "4 MiB − 12"},
	} {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("the format docs do not say %q", c.want)
		}
	}
}

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
