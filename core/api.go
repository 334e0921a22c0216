package core

import (
	"errors"
	"time"
)

// Protocol and state names are marshalled as text in status documents.

// MarshalText encodes the protocol name.
func (p Protocol) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Role is a node's replication role, as RocketMQ's brokerRole.
type Role int

const (
	AsyncMaster Role = iota // put returns after the local append (RocketMQ default)
	SyncMaster              // put waits for slave acks
	Slave                   // follows a master; rejects producer appends
)

func (r Role) String() string {
	switch r {
	case AsyncMaster:
		return "ASYNC_MASTER"
	case SyncMaster:
		return "SYNC_MASTER"
	case Slave:
		return "SLAVE"
	}
	return "UNKNOWN"
}

// PutStatus is the outcome of a stored put, as RocketMQ's PutMessageStatus.
// All four values mean the message is stored on the master.
type PutStatus int

const (
	PutOK             PutStatus = iota // PUT_OK
	FlushDiskTimeout                   // FLUSH_DISK_TIMEOUT
	FlushSlaveTimeout                  // FLUSH_SLAVE_TIMEOUT
	SlaveNotAvailable                  // SLAVE_NOT_AVAILABLE
)

func (s PutStatus) String() string {
	switch s {
	case PutOK:
		return "PUT_OK"
	case FlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case FlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case SlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return "UNKNOWN"
}

// PutResult is the answer to a stored put.
type PutResult struct {
	Status      PutStatus
	Offset      int64 // physical offset of the record
	NextOffset  int64 // offset after the record
	QueueOffset int64
}

// BatchPut is one message's answer of Master.PutBatch: the result and
// the error Put would have returned for it alone.
type BatchPut struct {
	PutResult
	Err error
}

// Errors returned by core. Store errors pass through wrapped.
var (
	// ErrBatchAborted: the message was not stored because the append of an
	// earlier message of its batch failed (Master.PutBatch); it wraps that
	// failure.
	ErrBatchAborted        = errors.New("replicator: not stored: an earlier message of the batch failed")
	ErrSlaveWriteProtected = errors.New("replicator: slave rejects producer writes")
	ErrClosed              = errors.New("replicator: closed")
	ErrInvalidConfig       = errors.New("replicator: invalid config")
	ErrOffsetMismatch      = errors.New("replicator: master pushed offset not equal to slave max offset")
	ErrNotStarted          = errors.New("replicator: not started")
	ErrAlreadyStarted      = errors.New("replicator: already started")
)

// startable is the check Start begins with (Master, SlaveNode): a closed
// component cannot start, a started one not again.
func startable(closed, started bool) error {
	switch {
	case closed:
		return ErrClosed
	case started:
		return ErrAlreadyStarted
	}
	return nil
}

// SlaveInfo is a master's view of one connected slave.
type SlaveInfo struct {
	Addr          string
	RequestOffset int64 // first report; -1 before it
	AckOffset     int64
	LagBytes      int64 // master max offset - ack offset
	LastAck       time.Time
	NextTransfer  int64 // next offset the writer ships
	OutOfRange    bool  // the request offset is outside the master's log: heartbeats only (RocketMQ #3388)
	// Autoswitch only.
	HAState      string // "HANDSHAKE" until the slave's first ack, then "TRANSFER"
	BrokerID     int64  // from the slave's handshake; -1 before it
	AsyncLearner bool   // the slave never joins the SyncStateSet
	InSync       bool   // a member of the master's SyncStateSet
}

// MasterStatus is a snapshot of a master.
type MasterStatus struct {
	Role      Role
	Addr      string // HA listen address
	MaxOffset int64  // the master's commit-log max offset
	Slaves    []SlaveInfo
	// Autoswitch only.
	Protocol      Protocol
	Epoch         int32   // the epoch served (last entry of the epoch file)
	ConfirmOffset int64   // RocketMQ 5's confirm offset (classic: the max offset)
	SyncStateSet  []int64 // confirmed in-sync broker ids, the master's own included
	Proposed      []int64 // a SyncStateSet change in flight (nil: none)
	Fenced        string  // the fence reason; "" while accepting puts
}

// SlaveStatus is a snapshot of a slave's HA client.
type SlaveStatus struct {
	MasterAddr    string
	Connected     bool
	AckSent       int64  // last offset reported to the master
	LastError     string // last connection error, "" when healthy
	SegmentError  string // set when a frame crossed this slave's segment end (segment size mismatch)
	Reconnects    int64
	LastFrameTime time.Time
	MaxOffset     int64 // the slave's commit-log max offset
	Protocol      Protocol
	// HAState is the connection's state: "READY" while not connected,
	// "HANDSHAKE" (autoswitch) until the handshake and truncation are done,
	// "TRANSFER" while receiving.
	HAState       string
	ConfirmOffset int64 // min(master's confirm offset, local max); classic: the local max
	// Unhealthy is set when the slave refuses to replicate from this master
	// (no consistent point, bytes that are not records where this log has
	// a record boundary, a log the master cannot serve); "" when healthy.
	Unhealthy string
	// Truncated is the last truncation done at a handshake (autoswitch).
	Truncated *Truncation
}

// Truncation describes what a slave cut at a handshake.
type Truncation struct {
	From, To int64 // the log was cut from its max offset From down to To
	Bytes    int64
	Records  int
	Time     time.Time
}
