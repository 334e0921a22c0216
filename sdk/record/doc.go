// Package record is RocketMQ's message format v1: the byte layout of one
// record in the commit log, shared by every store and by the HA wire, which
// ships records verbatim.
package record
