// Package interop checks replicator against peers it did not write: an
// independent Java implementation of RocketMQ 4.x's classic HA protocol
// (java/HaSlave.java, java/HaMaster.java, compiled with javac by the tests)
// and, when ROCKETMQ_HOME points at an unpacked RocketMQ 4.9 binary
// distribution, real RocketMQ brokers. The package holds only tests; see
// README.md for what each test proves and how to run it.
//
// The protocol under test, big-endian on the wire:
//
//	slave -> master   [max offset int64]                      request, then acks
//	master -> slave   [offset int64][size int32][size bytes]  size <= 32 KiB, 0 = heartbeat
//
// and the commit-log layout both sides must share: segment files named by
// their start offset in 20 digits, all of one size, records in RocketMQ
// message format v1, the 8-byte end-of-file filler [remaining int32]
// [0xCBD43194] where a record plus 8 bytes does not fit a segment's rest.
// Every test compares commit-log files byte for byte.
package interop
