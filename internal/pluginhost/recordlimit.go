package pluginhost

import "github.com/replicatorhq/replicator/sdk/record"

// MaxRecordOverhead is the most a record adds to its body: the fixed part
// with two IPv6 hosts, the longest topic and the largest properties.
const MaxRecordOverhead = record.MinRecordSize + 2*12 + record.MaxTopicLength + record.MaxPropertiesSize

// RecordLimit returns the record bound (a store's TOTALSIZE limit, the
// max_message_size option of a store plugin) under which every message with
// a body of at most body bytes fits, whatever its topic and properties.
// StoreOptions.MaxMessageSize bounds the body; stores bound the record.
func RecordLimit(body int64) int64 {
	if body <= 0 {
		return body
	}
	return body + MaxRecordOverhead
}
