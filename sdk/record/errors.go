package record

import "errors"

// Errors returned by the codec. A torn record (ErrShort) is what a crash
// leaves at the end of a log and is recoverable by truncation; the others
// (ErrBadMagic, ErrBadLength, ErrChecksum) mean the bytes are not a record.
// Callers tell them apart with errors.Is; IsCorrupt groups the last three.
var (
	// ErrShort means b ends before the record does (or before its header):
	// a torn tail, or a read that stopped early.
	ErrShort = errors.New("record: short record")
	// ErrBadMagic means MAGICCODE is neither MagicCode nor BlankMagic.
	ErrBadMagic = errors.New("record: bad magic code")
	// ErrBadLength means TOTALSIZE or an inner length field is out of
	// bounds or inconsistent with the others.
	ErrBadLength = errors.New("record: bad length")
	// ErrChecksum means BODYCRC does not match the body.
	ErrChecksum = errors.New("record: body checksum mismatch")
	// ErrFiller means the bytes are an end-of-file filler, not a message;
	// the filler's size is reported alongside (see Verify).
	ErrFiller = errors.New("record: end-of-file filler")

	// ErrInvalidTopic means a topic breaks RocketMQ's rules (see ValidateTopic).
	ErrInvalidTopic = errors.New("record: invalid topic")
	// ErrInvalidProperty means a property key or value contains one of the
	// separators \u0001 or \u0002, a key is empty, or the encoded
	// properties exceed MaxPropertiesSize.
	ErrInvalidProperty = errors.New("record: invalid property")
	// ErrInvalidHost means a host is neither IPv4, IPv6 nor the zero value.
	ErrInvalidHost = errors.New("record: invalid host address")
	// ErrTooLarge means the encoded record would exceed MaxRecordSize.
	ErrTooLarge = errors.New("record: record too large")
)

// IsCorrupt reports whether err says the bytes are not a valid record
// (ErrBadMagic, ErrBadLength or ErrChecksum), as opposed to merely torn
// (ErrShort) or a filler (ErrFiller).
func IsCorrupt(err error) bool {
	return errors.Is(err, ErrBadMagic) || errors.Is(err, ErrBadLength) || errors.Is(err, ErrChecksum)
}
