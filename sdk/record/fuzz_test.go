package record

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// FuzzDecode: no input panics; Verify and Decode agree; a decoded record
// that re-encodes (its topic and properties are valid) decodes back to the
// same record, and a canonical record re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	m := Message{Topic: "TopicTest", QueueID: 3, Body: []byte("hello"), Properties: map[string]string{"KEYS": "k1", "TAGS": "a"}}
	good, _ := Encode(nil, &m, 5, 4096, 1700000000000)
	f.Add(good)
	f.Add(good[:50])
	f.Add([]byte{0, 0, 0, 64, 0xCB, 0xD4, 0x31, 0x94})
	f.Fuzz(func(t *testing.T, b []byte) {
		info, verr := Verify(b)
		hinfo, herr := VerifyHeader(b)
		rec, err := Decode(b)
		if verr != nil {
			if err == nil || !errors.Is(err, errors.Unwrap(verr)) && err.Error() != verr.Error() {
				t.Fatalf("Verify: %v, Decode: %v", verr, err)
			}
			if errors.Is(verr, ErrChecksum) == (herr != nil) {
				t.Fatalf("VerifyHeader: %v, Verify: %v", herr, verr)
			}
			return
		}
		if herr != nil || hinfo.Size != info.Size {
			t.Fatalf("VerifyHeader %+v, %v; Verify %+v", hinfo, herr, info)
		}
		if info.Filler {
			if !errors.Is(err, ErrFiller) || rec.TotalSize != info.Size {
				t.Fatalf("filler: Decode %+v, %v", rec, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Verify accepted what Decode refuses: %v", err)
		}
		if int(rec.TotalSize) > len(b) || len(rec.Body) > len(b) {
			t.Fatalf("decoded sizes exceed the input")
		}
		out, err := Encode(nil, &rec.Message, rec.QueueOffset, rec.PhysicalOffset, rec.StoreTimestamp)
		if err != nil {
			return // not encodable: invalid topic or property from raw bytes
		}
		rec2, err := Decode(out)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if out2, err := Encode(nil, &rec2.Message, rec2.QueueOffset, rec2.PhysicalOffset, rec2.StoreTimestamp); err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not a fixed point: %v", err)
		}
		if rec.BornTimestamp == 0 {
			rec.BornTimestamp = rec.StoreTimestamp
		}
		rec.SysFlag, rec2.SysFlag = 0, 0
		rec.TotalSize, rec2.TotalSize = 0, 0
		normHosts(&rec.Message)
		normHosts(&rec2.Message)
		if !reflect.DeepEqual(rec, rec2) {
			t.Fatalf("re-decoded record differs:\n%+v\n%+v", rec, rec2)
		}
	})
}

func normHosts(m *Message) {
	if a := m.BornHost.Addr(); a.Is4In6() {
		m.BornHost = netipFrom(a.Unmap(), m.BornHost.Port())
	}
	if a := m.StoreHost.Addr(); a.Is4In6() {
		m.StoreHost = netipFrom(a.Unmap(), m.StoreHost.Port())
	}
}

func netipFrom(a netip.Addr, port uint16) netip.AddrPort {
	ap := netip.AddrPortFrom(a, port)
	if ap == netip.AddrPortFrom(netip.AddrFrom4([4]byte{}), 0) {
		return netip.AddrPort{}
	}
	return ap
}
