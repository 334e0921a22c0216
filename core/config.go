package core

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/transport"
)

// RocketMQ's defaults (rocketmq-ha-spec.md section 7); SlaveTimeout follows the
// original design notes (5 s) rather than 4.9.3+'s 3 s.
const (
	DefaultSlaveTimeout         = 5 * time.Second
	DefaultSlaveFallBehindMax   = 256 << 20
	DefaultHeartbeatInterval    = 5 * time.Second
	DefaultHousekeepingInterval = 20 * time.Second
	DefaultReportInterval       = 5 * time.Second
	DefaultReconnectDelay       = 5 * time.Second
	DefaultConnectTimeout       = 5 * time.Second

	// DefaultMaxTimeSlaveNotCatchup is RocketMQ's haMaxTimeSlaveNotCatchup:
	// an in-sync member that has not caught up for this long leaves the
	// SyncStateSet (autoswitch).
	DefaultMaxTimeSlaveNotCatchup = 15 * time.Second
	// DefaultCheckSyncStateSetPeriod is RocketMQ's checkSyncStateSetPeriod:
	// how often the master looks for members to drop (autoswitch).
	DefaultCheckSyncStateSetPeriod = 5 * time.Second
)

// MasterConfig configures a Master. Zero values take RocketMQ's defaults
// (see DefaultMasterConfig).
type MasterConfig struct {
	ListenAddr string // HA listen address, e.g. "127.0.0.1:10912"
	Role       Role   // AsyncMaster or SyncMaster
	// SyncAcks is, for a SyncMaster, the number of distinct slaves that
	// must ack a put. Classic: default 1. Autoswitch: 0 (the default)
	// waits for every member of the SyncStateSet but the master itself;
	// a positive value waits for that many distinct handshaken,
	// non-learner slaves.
	SyncAcks int
	// Protocol is the HA wire protocol served (default classic).
	Protocol Protocol
	// Epochs is the epoch file (autoswitch: required; its last entry is
	// the master's epoch).
	Epochs *epoch.File
	// BrokerID is the master's own broker id, a member of its
	// SyncStateSet (autoswitch).
	BrokerID int64
	// MaxTimeSlaveNotCatchup: an in-sync member that has not caught up
	// for this long is dropped from the SyncStateSet (default 15 s). Only
	// acks catch a member up (see the package documentation); an idle
	// connection is heartbeated at a third of it at least, and the slave
	// acks each heartbeat.
	MaxTimeSlaveNotCatchup time.Duration
	// CheckSyncStateSetPeriod is how often members are checked (default 5 s).
	CheckSyncStateSetPeriod time.Duration
	// SyncStateSetConfirmer confirms SyncStateSet changes before they take
	// effect (a controller's AlterSyncStateSet); nil: local, immediate.
	SyncStateSetConfirmer SyncStateSetConfirmer
	SlaveTimeout          time.Duration // SyncMaster wait (default 5s)
	SlaveFallBehindMax    int64         // SLAVE_NOT_AVAILABLE gap (default 256 MiB)
	// MaxLag, when positive, makes an AsyncMaster's Put wait (at most
	// SlaveTimeout) while the SyncAcks-th best connected slave is more than
	// MaxLag bytes behind the put: back-pressure that bounds the
	// replication lag when producers write faster than the link carries.
	// The put is stored either way and answers PUT_OK; with no slave
	// available (none connected, or all SlaveFallBehindMax behind) it does
	// not wait. 0 (the default) is RocketMQ's behaviour: no flow control.
	MaxLag                int64
	TransferBatchSize     int                   // max frame body (default 32 KiB, below 4 MiB-12)
	HeartbeatInterval     time.Duration         // heartbeat after this long without sending (default 5s)
	HousekeepingInterval  time.Duration         // close a connection that read nothing this long (default 20s)
	StartFromFirstSegment bool                  // report 0 starts at the first segment (5.x) instead of the last (4.x)
	Logger                hclog.Logger          // nil: no logs
	Registerer            prometheus.Registerer // nil: no metrics
}

// DefaultMasterConfig returns an ASYNC_MASTER configuration with RocketMQ's
// defaults and no listen address.
func DefaultMasterConfig() MasterConfig {
	return MasterConfig{
		Role:                 AsyncMaster,
		SyncAcks:             1,
		SlaveTimeout:         DefaultSlaveTimeout,
		SlaveFallBehindMax:   DefaultSlaveFallBehindMax,
		TransferBatchSize:    transport.DefaultBatchSize,
		HeartbeatInterval:    DefaultHeartbeatInterval,
		HousekeepingInterval: DefaultHousekeepingInterval,
	}
}

// withDefaults fills zero values with the defaults.
func (c MasterConfig) withDefaults() MasterConfig {
	d := DefaultMasterConfig()
	setDefault(&c.MaxTimeSlaveNotCatchup, DefaultMaxTimeSlaveNotCatchup)
	setDefault(&c.CheckSyncStateSetPeriod, DefaultCheckSyncStateSetPeriod)
	if c.SyncAcks == 0 && c.Protocol == ProtocolClassic {
		c.SyncAcks = d.SyncAcks
	}
	setDefault(&c.SlaveTimeout, d.SlaveTimeout)
	setDefault(&c.SlaveFallBehindMax, d.SlaveFallBehindMax)
	setDefault(&c.TransferBatchSize, d.TransferBatchSize)
	setDefault(&c.HeartbeatInterval, d.HeartbeatInterval)
	setDefault(&c.HousekeepingInterval, d.HousekeepingInterval)
	return c
}

// Validate reports the first invalid field of c (after defaults are applied
// to zero values).
func (c MasterConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.ListenAddr == "":
		return fmt.Errorf("%w: master ListenAddr is empty", ErrInvalidConfig)
	case c.Role != AsyncMaster && c.Role != SyncMaster:
		return fmt.Errorf("%w: master Role %v", ErrInvalidConfig, c.Role)
	case c.Protocol != ProtocolClassic && c.Protocol != ProtocolAutoSwitch:
		return fmt.Errorf("%w: master Protocol %v", ErrInvalidConfig, c.Protocol)
	case c.Protocol == ProtocolClassic && c.SyncAcks < 1:
		return fmt.Errorf("%w: SyncAcks %d < 1", ErrInvalidConfig, c.SyncAcks)
	case c.SyncAcks < 0:
		return fmt.Errorf("%w: SyncAcks %d < 0", ErrInvalidConfig, c.SyncAcks)
	case c.Protocol == ProtocolAutoSwitch && c.Epochs == nil:
		return fmt.Errorf("%w: autoswitch master needs an epoch file (Epochs)", ErrInvalidConfig)
	case c.MaxTimeSlaveNotCatchup < 0:
		return fmt.Errorf("%w: MaxTimeSlaveNotCatchup %v < 0", ErrInvalidConfig, c.MaxTimeSlaveNotCatchup)
	case c.CheckSyncStateSetPeriod < 0:
		return fmt.Errorf("%w: CheckSyncStateSetPeriod %v < 0", ErrInvalidConfig, c.CheckSyncStateSetPeriod)
	case c.SlaveTimeout < 0:
		return fmt.Errorf("%w: SlaveTimeout %v < 0", ErrInvalidConfig, c.SlaveTimeout)
	case c.SlaveFallBehindMax < 0:
		return fmt.Errorf("%w: SlaveFallBehindMax %d < 0", ErrInvalidConfig, c.SlaveFallBehindMax)
	case c.MaxLag < 0:
		return fmt.Errorf("%w: MaxLag %d < 0", ErrInvalidConfig, c.MaxLag)
	case c.Protocol == ProtocolAutoSwitch && c.TransferBatchSize > transport.MaxTransferBodyLimit:
		return fmt.Errorf("%w: TransferBatchSize %d above the autoswitch limit %d", ErrInvalidConfig, c.TransferBatchSize, transport.MaxTransferBodyLimit)
	case c.TransferBatchSize < 1 || c.TransferBatchSize > transport.MaxBodyLimit:
		return fmt.Errorf("%w: TransferBatchSize %d outside [1, %d]", ErrInvalidConfig, c.TransferBatchSize, transport.MaxBodyLimit)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("%w: HeartbeatInterval %v < 0", ErrInvalidConfig, c.HeartbeatInterval)
	case c.HousekeepingInterval < 0:
		return fmt.Errorf("%w: HousekeepingInterval %v < 0", ErrInvalidConfig, c.HousekeepingInterval)
	}
	return nil
}

// setDefault sets *v to d when *v is zero (withDefaults).
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// prepare is how NewMaster and NewSlave begin: the store and transport
// present (deps), cfg valid and with its defaults, a logger named role (a
// null logger for nil) and the role's metrics registered on reg.
func prepare[C interface {
	Validate() error
	withDefaults() C
}, M any](deps bool, cfg C, role string, logger hclog.Logger, reg prometheus.Registerer, newMetrics func(prometheus.Registerer) (M, error)) (C, hclog.Logger, M, error) {
	var met M
	if !deps {
		return cfg, nil, met, fmt.Errorf("%w: nil store or transport", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, met, err
	}
	cfg = cfg.withDefaults()
	log, met, err := observe(role, logger, reg, newMetrics)
	return cfg, log, met, err
}

// observe returns logger (a null logger for nil) named role and the role's
// metrics registered on reg (NewMaster, NewSlave, NewReplica).
func observe[M any](role string, logger hclog.Logger, reg prometheus.Registerer, newMetrics func(prometheus.Registerer) (M, error)) (hclog.Logger, M, error) {
	met, err := newMetrics(reg)
	if err != nil {
		return nil, met, fmt.Errorf("replicator: %s metrics: %w", role, err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return logger.Named(role), met, nil
}

// SlaveConfig configures a Slave HA client. Zero values take RocketMQ's
// defaults (see DefaultSlaveConfig).
type SlaveConfig struct {
	MasterAddr           string        // master's HA address (RocketMQ haMasterAddress)
	ReportInterval       time.Duration // report at least this often (default 5s)
	HousekeepingInterval time.Duration // close after reading nothing this long (default 20s)
	// ReconnectDelay is the wait before reconnecting once a connection of
	// this client was up (default 5s); until then (after Start, so after
	// a role change) retries back off from 50 ms, doubling, up to it.
	ReconnectDelay time.Duration
	ConnectTimeout time.Duration // default 5s
	MaxFrameBody   int           // reject frames with a larger size field (default 4 MiB - 12; autoswitch 4 MiB - 36)
	// Protocol is the HA wire protocol spoken (default classic).
	Protocol Protocol
	// Epochs is the epoch file (autoswitch: required).
	Epochs *epoch.File
	// BrokerID is sent in the autoswitch handshake.
	BrokerID int64
	// SyncFromLastFile: an empty slave asks to start at the master's last
	// segment instead of its first (autoswitch handshake flag).
	SyncFromLastFile bool
	// AsyncLearner: the slave never joins the master's SyncStateSet
	// (autoswitch handshake flag).
	AsyncLearner bool
	Logger       hclog.Logger
	Registerer   prometheus.Registerer
}

// DefaultSlaveConfig returns RocketMQ's slave defaults with no master address.
func DefaultSlaveConfig() SlaveConfig {
	return SlaveConfig{
		ReportInterval:       DefaultReportInterval,
		HousekeepingInterval: DefaultHousekeepingInterval,
		ReconnectDelay:       DefaultReconnectDelay,
		ConnectTimeout:       DefaultConnectTimeout,
		MaxFrameBody:         transport.MaxBodyLimit,
	}
}

func (c SlaveConfig) withDefaults() SlaveConfig {
	d := DefaultSlaveConfig()
	setDefault(&c.ReportInterval, d.ReportInterval)
	setDefault(&c.HousekeepingInterval, d.HousekeepingInterval)
	setDefault(&c.ReconnectDelay, d.ReconnectDelay)
	setDefault(&c.ConnectTimeout, d.ConnectTimeout)
	if c.MaxFrameBody == 0 {
		c.MaxFrameBody = d.MaxFrameBody
		if c.Protocol == ProtocolAutoSwitch {
			c.MaxFrameBody = transport.MaxTransferBodyLimit
		}
	}
	return c
}

// Validate reports the first invalid field of c (after defaults are applied
// to zero values).
func (c SlaveConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MasterAddr == "":
		return fmt.Errorf("%w: slave MasterAddr is empty", ErrInvalidConfig)
	case c.ReportInterval < 0:
		return fmt.Errorf("%w: ReportInterval %v < 0", ErrInvalidConfig, c.ReportInterval)
	case c.HousekeepingInterval < 0:
		return fmt.Errorf("%w: HousekeepingInterval %v < 0", ErrInvalidConfig, c.HousekeepingInterval)
	case c.ReconnectDelay < 0:
		return fmt.Errorf("%w: ReconnectDelay %v < 0", ErrInvalidConfig, c.ReconnectDelay)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("%w: ConnectTimeout %v < 0", ErrInvalidConfig, c.ConnectTimeout)
	case c.Protocol != ProtocolClassic && c.Protocol != ProtocolAutoSwitch:
		return fmt.Errorf("%w: slave Protocol %v", ErrInvalidConfig, c.Protocol)
	case c.Protocol == ProtocolAutoSwitch && c.Epochs == nil:
		return fmt.Errorf("%w: autoswitch slave needs an epoch file (Epochs)", ErrInvalidConfig)
	case c.MaxFrameBody < 1 || c.MaxFrameBody > transport.MaxBodyLimit:
		return fmt.Errorf("%w: MaxFrameBody %d outside [1, %d]", ErrInvalidConfig, c.MaxFrameBody, transport.MaxBodyLimit)
	}
	return nil
}
