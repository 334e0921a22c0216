package core

// SKELETON: the public API of package core, agreed between the core and the
// daemon work. Bodies marked "skeleton" are filled in by the core work; the
// signatures and types may grow fields but should not change shape without
// updating cmd/replicator.

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
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
)

// MasterConfig configures a Master. Zero values take RocketMQ's defaults
// (see DefaultMasterConfig).
type MasterConfig struct {
	ListenAddr            string                // HA listen address, e.g. "127.0.0.1:10912"
	Role                  Role                  // AsyncMaster or SyncMaster
	SyncAcks              int                   // SyncMaster: distinct slaves that must ack (default 1)
	SlaveTimeout          time.Duration         // SyncMaster wait (default 5s)
	SlaveFallBehindMax    int64                 // SLAVE_NOT_AVAILABLE gap (default 256 MiB)
	TransferBatchSize     int                   // max frame body (default 32 KiB, below 4 MiB-12)
	HeartbeatInterval     time.Duration         // heartbeat after this long without sending (default 5s)
	HousekeepingInterval  time.Duration         // close a connection that read nothing this long (default 20s)
	StartFromFirstSegment bool                  // report 0 starts at the first segment (5.x) instead of the last (4.x)
	Logger                hclog.Logger          // nil: no logs
	Registerer            prometheus.Registerer // nil: no metrics
}

// SlaveConfig configures a Slave HA client.
type SlaveConfig struct {
	MasterAddr           string        // master's HA address (RocketMQ haMasterAddress)
	ReportInterval       time.Duration // report at least this often (default 5s)
	HousekeepingInterval time.Duration // close after reading nothing this long (default 20s)
	ReconnectDelay       time.Duration // wait after a failed or dropped connection (default 5s)
	ConnectTimeout       time.Duration // default 5s
	MaxFrameBody         int           // reject frames with a larger size field (default 4 MiB - 12)
	Logger               hclog.Logger
	Registerer           prometheus.Registerer
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
}

// MasterStatus is a snapshot of a master.
type MasterStatus struct {
	Role   Role
	Addr   string // HA listen address
	Slaves []SlaveInfo
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
}

// Master serves the commit log to slaves and runs group transfer.
type Master struct{}

// NewMaster returns a master over st that listens with tr. Start begins serving.
func NewMaster(st store.Store, tr transport.Transport, cfg MasterConfig) (*Master, error) {
	panic("skeleton")
}

// Start opens the HA listener and starts the accept loop.
func (m *Master) Start() error { panic("skeleton") }

// Addr is the bound HA listen address (useful with port 0).
func (m *Master) Addr() string { panic("skeleton") }

// Put appends msg and, for SyncMaster, waits for slave acks.
func (m *Master) Put(ctx context.Context, msg *record.Message) (PutResult, error) {
	panic("skeleton")
}

// Status reports the master and its slaves.
func (m *Master) Status() MasterStatus { panic("skeleton") }

// Close stops accepting, closes slave connections, releases waiters
// (FLUSH_SLAVE_TIMEOUT) and waits for every goroutine. Idempotent. It does
// not close the store.
func (m *Master) Close() error { panic("skeleton") }

// SlaveNode follows a master and appends what it ships.
type SlaveNode struct{}

// NewSlave returns a slave HA client over st. Start begins replicating.
func NewSlave(st store.Store, tr transport.Transport, cfg SlaveConfig) (*SlaveNode, error) {
	panic("skeleton")
}

// Start launches the HA client loop.
func (s *SlaveNode) Start() error { panic("skeleton") }

// Status reports the HA client.
func (s *SlaveNode) Status() SlaveStatus { panic("skeleton") }

// Put always fails with ErrSlaveWriteProtected (slave write protection).
func (s *SlaveNode) Put(ctx context.Context, msg *record.Message) (PutResult, error) {
	return PutResult{}, ErrSlaveWriteProtected
}

// Close stops the client and waits for its goroutines. Idempotent. It does
// not close the store.
func (s *SlaveNode) Close() error { panic("skeleton") }
