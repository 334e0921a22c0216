// Package record is RocketMQ's message format v1: the byte layout of one
// record in the commit log, shared by every store and by the HA wire, which
// ships records verbatim. It is the only package that knows this layout.
//
// # Record (MAGICCODE 0xDAA320A7), all integers big-endian
//
// Offsets are for IPv4 hosts (SYSFLAG bits 4 and 5 clear). Each IPv6 host
// (BornHostV6Flag, StoreHostV6Flag) is 16+4 bytes instead of 4+4 and moves
// every later field by 12 bytes.
//
//	 off  size  field
//	   0     4  TOTALSIZE        whole record, this field included (>= 91)
//	   4     4  MAGICCODE        0xDAA320A7
//	   8     4  BODYCRC          crc32.ChecksumIEEE(body) & 0x7FFFFFFF
//	  12     4  QUEUEID
//	  16     4  FLAG
//	  20     8  QUEUEOFFSET      per (topic, queue), assigned by the store
//	  28     8  PHYSICALOFFSET   commit-log offset of byte 0 of this record
//	  36     4  SYSFLAG
//	  40     8  BORNTIMESTAMP    producer clock, Unix ms
//	  48     8  BORNHOST         IPv4 4 bytes + port as int32
//	  56     8  STORETIMESTAMP   store clock, Unix ms
//	  64     8  STOREHOSTADDRESS IPv4 4 bytes + port as int32
//	  72     4  RECONSUMETIMES
//	  76     8  PREPARED TRANSACTION OFFSET
//	  84     4  BODYLENGTH  b
//	  88     b  BODY
//	88+b     1  TOPICLENGTH t    (1..127)
//	89+b     t  TOPIC            [%|a-zA-Z0-9_-]
//	89+b+t   2  PROPERTIESLENGTH p (int16, 0..32767)
//	91+b+t   p  PROPERTIES       k1 \u0001 v1 \u0002 k2 \u0001 v2 \u0002 ... (keys sorted)
//
//	TOTALSIZE = 91 + b + t + p
//
// # End-of-file filler (8 bytes)
//
// When a record plus 8 bytes does not fit the rest of a segment, the writer
// puts a filler there and continues in the next segment; the rest of the
// segment after the filler is left as it was (zeros).
//
//	off  size  field
//	  0     4  remaining bytes of the segment, filler included
//	  4     4  BLANKMAGIC 0xCBD43194
//
// # Golden example
//
// Topic "T", queue 1, body "hi", no properties, QUEUEOFFSET 0,
// PHYSICALOFFSET 0, all timestamps and hosts zero, is the 94-byte record
// written out byte by byte in TestRecordGolden.
//
// # Errors
//
// ErrShort marks a torn record (the buffer ends first: recoverable by
// truncation); ErrBadMagic, ErrBadLength and ErrChecksum mark bytes that
// are not a record (IsCorrupt). Every length field is checked against the
// buffer before it is used, so no input makes the decoder read out of
// bounds or allocate more than the input's size; a host port above 65535
// is ErrBadLength too. BODYCRC covers only the body: damage to the other
// fields of a record that keeps its lengths consistent goes unnoticed, as
// in RocketMQ (the commit log's recovery adds its own checks).
//
// # Cost
//
// Encode writes into the caller's buffer and does not allocate when it is
// large enough (Append encodes straight into the mapped segment); Verify
// and VerifyHeader never allocate; Decode copies everything it returns.
//
// Magic 0xDAA320AB (message format v2, 2-byte topic length) is not
// supported: RocketMQ writes it only for topics longer than 127 bytes,
// which ValidateTopic refuses.
package record
