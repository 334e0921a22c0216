package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"net/netip"
	"slices"
)

// SYSFLAG bits that change the record layout (RocketMQ MessageSysFlag).
const (
	// BornHostV6Flag: BORNHOST is 16+4 bytes (IPv6) instead of 4+4.
	BornHostV6Flag int32 = 1 << 4
	// StoreHostV6Flag: STOREHOSTADDRESS is 16+4 bytes (IPv6) instead of 4+4.
	StoreHostV6Flag int32 = 1 << 5
)

// Byte offsets of the fixed fields of a v1 record. Part of the on-disk and
// wire format; never change them. Fields after BORNHOST move by 12 bytes
// for each IPv6 host (see doc.go).
const (
	offTotalSize      = 0
	offMagic          = 4
	offBodyCRC        = 8
	offQueueID        = 12
	offFlag           = 16
	offQueueOffset    = 20
	offPhysicalOffset = 28
	offSysFlag        = 36
	offBornTimestamp  = 40
	offBornHost       = 48
)

const (
	ipv4HostSize = 8
	ipv6HostSize = 20
	// MinRecordSize is the size of a record with IPv4 hosts, an empty
	// body, a 0-byte topic and no properties: the 91 bytes of RocketMQ's
	// MessageExtEncoder.calMsgLength fixed part.
	MinRecordSize = 91
	// MaxRecordSize is the largest TOTALSIZE the codec accepts (int32).
	MaxRecordSize = math.MaxInt32
)

// BodyCRC is RocketMQ's UtilAll.crc32: the IEEE CRC-32 of body masked to 31 bits.
func BodyCRC(body []byte) uint32 { return crc32.ChecksumIEEE(body) & 0x7FFFFFFF }

// hostSize returns the encoded size of h (8 for IPv4 and the zero value,
// 20 for IPv6) and whether it is IPv6.
func hostSize(h netip.AddrPort) (int, bool, error) {
	a := h.Addr()
	switch {
	case !a.IsValid(), a.Is4(), a.Is4In6():
		return ipv4HostSize, false, nil
	case a.Is6():
		return ipv6HostSize, true, nil
	}
	return 0, false, ErrInvalidHost
}

// Size returns the encoded size of msg (its TOTALSIZE) after validating its
// topic, properties and hosts.
func Size(msg *Message) (int, error) {
	if err := ValidateTopic(msg.Topic); err != nil {
		return 0, err
	}
	p, err := propertiesSize(msg.Properties)
	if err != nil {
		return 0, err
	}
	bh, _, err := hostSize(msg.BornHost)
	if err != nil {
		return 0, fmt.Errorf("born host: %w", err)
	}
	sh, _, err := hostSize(msg.StoreHost)
	if err != nil {
		return 0, fmt.Errorf("store host: %w", err)
	}
	n := MinRecordSize - 2*ipv4HostSize + bh + sh + len(msg.Body) + len(msg.Topic) + p
	if n > MaxRecordSize || n < 0 {
		return 0, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	return n, nil
}

// Encode appends msg encoded as a v1 record to dst and returns the extended
// slice; it does not allocate when cap(dst)-len(dst) >= Size(msg). The
// store-assigned fields come from the arguments; BODYCRC is computed here;
// a zero msg.BornTimestamp is written as storeTimestamp. SYSFLAG is
// msg.SysFlag with the IPv6 host bits set to match the hosts. Properties are
// written with keys in sorted order, so a message always encodes to the
// same bytes. On error dst is returned unchanged.
func Encode(dst []byte, msg *Message, queueOffset, physicalOffset, storeTimestamp int64) ([]byte, error) {
	n, err := Size(msg)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	b := dst[start:]
	be := binary.BigEndian
	sysFlag := msg.SysFlag &^ (BornHostV6Flag | StoreHostV6Flag)
	if _, v6, _ := hostSize(msg.BornHost); v6 {
		sysFlag |= BornHostV6Flag
	}
	if _, v6, _ := hostSize(msg.StoreHost); v6 {
		sysFlag |= StoreHostV6Flag
	}
	born := msg.BornTimestamp
	if born == 0 {
		born = storeTimestamp
	}
	be.PutUint32(b[offTotalSize:], uint32(n))
	be.PutUint32(b[offMagic:], MagicCode)
	be.PutUint32(b[offBodyCRC:], BodyCRC(msg.Body))
	be.PutUint32(b[offQueueID:], uint32(msg.QueueID))
	be.PutUint32(b[offFlag:], uint32(msg.Flag))
	be.PutUint64(b[offQueueOffset:], uint64(queueOffset))
	be.PutUint64(b[offPhysicalOffset:], uint64(physicalOffset))
	be.PutUint32(b[offSysFlag:], uint32(sysFlag))
	be.PutUint64(b[offBornTimestamp:], uint64(born))
	p := offBornHost
	p += putHost(b[p:], msg.BornHost)
	be.PutUint64(b[p:], uint64(storeTimestamp))
	p += 8
	p += putHost(b[p:], msg.StoreHost)
	be.PutUint32(b[p:], uint32(msg.ReconsumeTimes))
	p += 4
	be.PutUint64(b[p:], uint64(msg.PreparedTransactionOffset))
	p += 8
	be.PutUint32(b[p:], uint32(len(msg.Body)))
	p += 4
	p += copy(b[p:], msg.Body)
	b[p] = byte(len(msg.Topic))
	p++
	p += copy(b[p:], msg.Topic)
	propLen := n - p - 2
	be.PutUint16(b[p:], uint16(propLen))
	p += 2
	appendProperties(b[p:p], msg.Properties)
	return dst, nil
}

func putHost(b []byte, h netip.AddrPort) int {
	a := h.Addr()
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is6() {
		a16 := a.As16()
		copy(b, a16[:])
		binary.BigEndian.PutUint32(b[16:], uint32(h.Port()))
		return ipv6HostSize
	}
	if a.Is4() {
		a4 := a.As4()
		copy(b, a4[:])
	} else {
		clear(b[:4])
	}
	binary.BigEndian.PutUint32(b[4:], uint32(h.Port()))
	return ipv4HostSize
}

// PutFiller writes the end-of-file filler [int32 remaining][int32
// BlankMagic] at the start of b (len(b) >= FillerSize).
func PutFiller(b []byte, remaining int32) {
	binary.BigEndian.PutUint32(b[0:], uint32(remaining))
	binary.BigEndian.PutUint32(b[4:], BlankMagic)
}

// IsFiller reports whether b starts with an end-of-file filler and returns
// the remaining byte count it declares.
func IsFiller(b []byte) (remaining int32, ok bool) {
	if len(b) < FillerSize || binary.BigEndian.Uint32(b[offMagic:]) != BlankMagic {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(b)), true
}

// Info is what Verify learns about the record at the start of a buffer,
// without copying: Topic aliases the buffer.
type Info struct {
	Size           int32 // TOTALSIZE, or the remaining count of a filler
	Filler         bool  // an end-of-file filler, not a message
	QueueID        int32
	QueueOffset    int64
	PhysicalOffset int64
	StoreTimestamp int64
	Topic          []byte // aliases the verified buffer
}

// TornTail reports whether the record r, which Verify accepted (info is
// what it said; info.Topic aliases r), ends in a zero byte where RocketMQ
// always writes a non-zero one: a property list ends with \u0002, or, in
// RocketMQ 4.9.1-4.9.8, with the last character of a value; a topic with
// one of [%|a-zA-Z0-9_-]. Without properties the record ends with their
// zero length, so the topic's last byte is checked instead. BODYCRC covers
// only the body: past the last flush, such a record is one whose last
// bytes were never written (a torn write), not a whole one.
func TornTail(r []byte, info Info) bool {
	topicEnd := cap(r) - cap(info.Topic) + len(info.Topic)
	if topicEnd+2 < len(r) {
		return r[len(r)-1] == 0
	}
	return len(info.Topic) > 0 && info.Topic[len(info.Topic)-1] == 0
}

// Verify checks the record at the start of b (TOTALSIZE bounds, MAGICCODE,
// every inner length and BODYCRC) without allocating. A filler is reported
// with Filler set and no error. Errors wrap ErrShort when b ends before the
// record, or ErrBadMagic, ErrBadLength or ErrChecksum.
func Verify(b []byte) (Info, error) { return verify(b, true) }

// VerifyHeader is Verify without the BODYCRC check, for scans that trust
// bytes already validated once (the checksum is most of Verify's cost).
func VerifyHeader(b []byte) (Info, error) { return verify(b, false) }

func verify(b []byte, checkCRC bool) (Info, error) {
	be := binary.BigEndian
	if len(b) < FillerSize {
		return Info{}, fmt.Errorf("%w: %d bytes, need %d for the header", ErrShort, len(b), FillerSize)
	}
	total := int32(be.Uint32(b[offTotalSize:]))
	switch magic := be.Uint32(b[offMagic:]); magic {
	case BlankMagic:
		if total < FillerSize {
			return Info{}, fmt.Errorf("%w: filler declares %d bytes", ErrBadLength, total)
		}
		return Info{Size: total, Filler: true}, nil
	case MagicCode:
	default:
		return Info{}, fmt.Errorf("%w: %#08x", ErrBadMagic, magic)
	}
	if total < MinRecordSize {
		return Info{}, fmt.Errorf("%w: TOTALSIZE %d below the minimum %d", ErrBadLength, total, MinRecordSize)
	}
	if int64(total) > int64(len(b)) {
		return Info{}, fmt.Errorf("%w: TOTALSIZE %d, %d bytes available", ErrShort, total, len(b))
	}
	r := b[:total]
	sysFlag := int32(be.Uint32(r[offSysFlag:]))
	bornSize, storeSize := ipv4HostSize, ipv4HostSize
	if sysFlag&BornHostV6Flag != 0 {
		bornSize = ipv6HostSize
	}
	if sysFlag&StoreHostV6Flag != 0 {
		storeSize = ipv6HostSize
	}
	// Fixed part up to the body length field, then body, topic, properties.
	p := offBornHost + bornSize + 8
	storeTSAt := p - 8
	p += storeSize + 4 + 8
	if p+4+1+2 > len(r) {
		return Info{}, fmt.Errorf("%w: TOTALSIZE %d too small for IPv6 hosts", ErrBadLength, total)
	}
	if be.Uint32(r[offBornHost+bornSize-4:]) > math.MaxUint16 || be.Uint32(r[storeTSAt+8+storeSize-4:]) > math.MaxUint16 {
		return Info{}, fmt.Errorf("%w: host port above 65535", ErrBadLength)
	}
	bodyLen := int32(be.Uint32(r[p:]))
	p += 4
	if bodyLen < 0 || int64(bodyLen) > int64(len(r)-p-1-2) {
		return Info{}, fmt.Errorf("%w: body length %d in a %d-byte record", ErrBadLength, bodyLen, total)
	}
	body := r[p : p+int(bodyLen)]
	p += int(bodyLen)
	topicLen := int(r[p])
	p++
	if topicLen > len(r)-p-2 {
		return Info{}, fmt.Errorf("%w: topic length %d in a %d-byte record", ErrBadLength, topicLen, total)
	}
	topic := r[p : p+topicLen]
	p += topicLen
	propLen := int16(be.Uint16(r[p:]))
	p += 2
	if propLen < 0 || p+int(propLen) != len(r) {
		return Info{}, fmt.Errorf("%w: properties length %d leaves %d of %d bytes unaccounted", ErrBadLength, propLen, len(r)-p-int(propLen), total)
	}
	if checkCRC {
		if want, got := be.Uint32(r[offBodyCRC:]), BodyCRC(body); want != got {
			return Info{}, fmt.Errorf("%w: stored %#08x, computed %#08x", ErrChecksum, want, got)
		}
	}
	return Info{
		Size:           total,
		QueueID:        int32(be.Uint32(r[offQueueID:])),
		QueueOffset:    int64(be.Uint64(r[offQueueOffset:])),
		PhysicalOffset: int64(be.Uint64(r[offPhysicalOffset:])),
		StoreTimestamp: int64(be.Uint64(r[storeTSAt:])),
		Topic:          topic,
	}, nil
}

// Decode verifies (as Verify) and decodes the record at the start of b.
// Everything is copied: the Record does not alias b. A filler gives an
// error wrapping ErrFiller, with TotalSize set to its remaining count.
func Decode(b []byte) (Record, error) {
	info, err := Verify(b)
	if err != nil {
		return Record{}, err
	}
	if info.Filler {
		return Record{TotalSize: info.Size}, fmt.Errorf("%w of %d bytes", ErrFiller, info.Size)
	}
	be := binary.BigEndian
	r := b[:info.Size]
	rec := Record{
		TotalSize:      info.Size,
		BodyCRC:        be.Uint32(r[offBodyCRC:]),
		QueueOffset:    info.QueueOffset,
		PhysicalOffset: info.PhysicalOffset,
		StoreTimestamp: info.StoreTimestamp,
	}
	m := &rec.Message
	m.QueueID = info.QueueID
	m.Flag = int32(be.Uint32(r[offFlag:]))
	m.SysFlag = int32(be.Uint32(r[offSysFlag:]))
	m.BornTimestamp = int64(be.Uint64(r[offBornTimestamp:]))
	p := offBornHost
	var n int
	if m.BornHost, n, err = getHost(r[p:], m.SysFlag&BornHostV6Flag != 0); err != nil {
		return Record{}, fmt.Errorf("born host: %w", err)
	}
	p += n + 8
	if m.StoreHost, n, err = getHost(r[p:], m.SysFlag&StoreHostV6Flag != 0); err != nil {
		return Record{}, fmt.Errorf("store host: %w", err)
	}
	p += n
	m.ReconsumeTimes = int32(be.Uint32(r[p:]))
	p += 4
	m.PreparedTransactionOffset = int64(be.Uint64(r[p:]))
	p += 8
	bodyLen := int(be.Uint32(r[p:]))
	p += 4
	if bodyLen > 0 {
		m.Body = append([]byte(nil), r[p:p+bodyLen]...)
	}
	p += bodyLen
	m.Topic = string(info.Topic)
	p += 1 + len(info.Topic)
	propLen := int(be.Uint16(r[p:]))
	p += 2
	m.Properties = ParseProperties(r[p : p+propLen])
	return rec, nil
}

func getHost(b []byte, v6 bool) (netip.AddrPort, int, error) {
	if v6 {
		port := be32(b[16:])
		if port > math.MaxUint16 {
			return netip.AddrPort{}, 0, fmt.Errorf("%w: port %d", ErrBadLength, port)
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])), uint16(port)), ipv6HostSize, nil
	}
	port := be32(b[4:])
	if port > math.MaxUint16 {
		return netip.AddrPort{}, 0, fmt.Errorf("%w: port %d", ErrBadLength, port)
	}
	a := [4]byte(b[:4])
	if a == [4]byte{} && port == 0 {
		return netip.AddrPort{}, ipv4HostSize, nil
	}
	return netip.AddrPortFrom(netip.AddrFrom4(a), uint16(port)), ipv4HostSize, nil
}

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
