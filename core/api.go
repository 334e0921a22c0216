package core

import (
	"errors"
	"time"
)

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

// Errors returned by core. Store errors pass through wrapped.
var (
	ErrSlaveWriteProtected = errors.New("replicator: slave rejects producer writes")
	ErrClosed              = errors.New("replicator: closed")
	ErrInvalidConfig       = errors.New("replicator: invalid config")
	ErrOffsetMismatch      = errors.New("replicator: master pushed offset not equal to slave max offset")
	ErrNotStarted          = errors.New("replicator: not started")
	ErrAlreadyStarted      = errors.New("replicator: already started")
)

// SlaveInfo is a master's view of one connected slave.
type SlaveInfo struct {
	Addr          string
	RequestOffset int64 // first report; -1 before it
	AckOffset     int64
	LagBytes      int64 // master max offset - ack offset
	LastAck       time.Time
	NextTransfer  int64 // next offset the writer ships
	OutOfRange    bool  // the request offset is outside the master's log: heartbeats only (RocketMQ #3388)
}

// MasterStatus is a snapshot of a master.
type MasterStatus struct {
	Role      Role
	Addr      string // HA listen address
	MaxOffset int64  // the master's commit-log max offset
	Slaves    []SlaveInfo
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
}
