package record

import "net/netip"

// Wire constants of RocketMQ's message format v1. They are part of the on-disk
// format and of the HA wire (records travel verbatim); never change them.
const (
	// MagicCode marks a v1 message record (1-byte topic length).
	MagicCode uint32 = 0xDAA320A7
	// BlankMagic marks the end-of-file filler written when a record plus
	// FillerSize bytes does not fit the rest of a segment.
	BlankMagic uint32 = 0xCBD43194
	// FillerSize is the size of the end-of-file filler: [int32 remaining][int32 BlankMagic].
	FillerSize = 8
)

// Message is what a producer hands to the master: the fields of a record
// that the store does not assign itself. The store fills in QUEUEOFFSET,
// PHYSICALOFFSET, STORETIMESTAMP and BODYCRC when it appends.
type Message struct {
	Topic   string // REQUIRED. RocketMQ topic rules: 1..127 bytes of [%|a-zA-Z0-9_-].
	QueueID int32
	Flag    int32
	Body    []byte
	// Properties are encoded as RocketMQ's key\u0001value\u0002 list, keys in
	// sorted order so that the same message always encodes to the same bytes.
	Properties map[string]string
	SysFlag    int32
	// BornTimestamp is the producer's clock in Unix milliseconds; 0 means "now".
	BornTimestamp int64
	// BornHost and StoreHost are IPv4 address:port pairs (v1 layout, 8 bytes
	// each). A zero value encodes as 0.0.0.0:0.
	BornHost                  netip.AddrPort
	StoreHost                 netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
}

// Record is a decoded record as stored in the commit log.
type Record struct {
	Message
	TotalSize      int32
	BodyCRC        uint32
	QueueOffset    int64
	PhysicalOffset int64
	StoreTimestamp int64
}
