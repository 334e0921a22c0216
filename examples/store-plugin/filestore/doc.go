// Package filestore is a small commit-log store written the way a third
// party would write one: against the public SDK only (sdk/store for the
// interface, sdk/record for RocketMQ's record format), with plain files and
// pread/pwrite instead of mmap. It is the store of the example plugin
// binary replicator-store-filestore (../main.go) and passes the SDK's
// conformance suite (sdk/storetest).
//
// On disk, in the store's directory:
//
//	00000000000000000000   segment files, named by their base offset (20 digits);
//	00000000000001048576   each at most SegmentSize bytes, written sequentially
//	MIN                    the first offset of the log, decimal (a slave's log
//	                       may start inside its first segment)
//
// A segment holds v1 records back to back; when the next record does not fit
// with room for an end-of-file filler, the filler ([int32 remaining][int32
// BlankMagic]) closes the segment and the record starts the next one, as
// RocketMQ does. Open recovers the max offset by verifying the records of the
// last segment and cuts a torn tail. This layout is the store's own business:
// the host reaches the store only through the sdk/store.Store interface
// (sdk/storeplugin carries its calls), never through these files.
package filestore
