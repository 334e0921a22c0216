package core

import (
	"errors"
	"fmt"
	"strings"
)

// Protocol is the HA wire protocol a Master serves or a SlaveNode speaks.
// The two are not compatible in either direction (a classic slave's 8-byte
// report is not a valid autoswitch state field, and the other way round).
type Protocol int

const (
	// ProtocolClassic is RocketMQ 4.x's HA protocol: 8-byte reports,
	// 12-byte frame headers, no handshake (the zero value).
	ProtocolClassic Protocol = iota
	// ProtocolAutoSwitch is RocketMQ 5's controller-mode protocol:
	// handshakes both ways, epochs, truncation to the consistent point,
	// 12-byte acks and 36-byte transfer headers.
	ProtocolAutoSwitch
)

// String returns "classic" or "autoswitch".
func (p Protocol) String() string {
	switch p {
	case ProtocolClassic:
		return "classic"
	case ProtocolAutoSwitch:
		return "autoswitch"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// ParseProtocol parses "classic" or "autoswitch" (case-insensitive).
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "classic":
		return ProtocolClassic, nil
	case "autoswitch":
		return ProtocolAutoSwitch, nil
	}
	return 0, fmt.Errorf("%w: HA protocol %q: want classic or autoswitch", ErrInvalidConfig, s)
}

// Errors of role changes.
var (
	// ErrFenced: the master was fenced (a demote, later a lost lease). New
	// puts are refused with it; puts that were waiting for slave acks
	// fail with it: their message is stored locally but may be cut when
	// this node becomes a slave of another master.
	ErrFenced = errors.New("replicator: master fenced")
	// ErrNotMaster: the replica is not a master (a slave, or no role yet).
	ErrNotMaster = errors.New("replicator: not the master")
)
