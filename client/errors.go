package client

import (
	"errors"
	"fmt"
)

// Storage says whether a failed put's message is stored.
type Storage int

const (
	// MaybeStored: the message may be stored (it reached a node, or may
	// have, and no answer came back). Sending it again may store it twice.
	MaybeStored Storage = iota
	// NotStored: no node stored the message; sending it again is safe.
	NotStored
)

func (s Storage) String() string {
	if s == NotStored {
		return "not stored"
	}
	return "may be stored"
}

// Errors of a put, checked with errors.Is on the error of Send, SendAsync's
// Future or SendBatch. Every put error is a *PutError, which also matches
// ErrNotStored or ErrMayBeStored.
var (
	// ErrNotStored matches a put error whose message is certainly not stored.
	ErrNotStored = errors.New("message not stored")
	// ErrMayBeStored matches a put error whose message may be stored.
	ErrMayBeStored = errors.New("message may be stored")

	// ErrInvalidMessage: bad topic, queue, property or an empty body.
	ErrInvalidMessage = errors.New("invalid message")
	// ErrTooLarge: the body is over the message size limit.
	ErrTooLarge = errors.New("message too large")
	// ErrNoMaster: the nodes tried are slaves or not masters, and no master
	// answered within the retry timeout.
	ErrNoMaster = errors.New("no master")
	// ErrUnavailable: no node could be reached within the retry timeout, or
	// the connection failed after the message was sent.
	ErrUnavailable = errors.New("node unavailable")
	// ErrNoListener matches a Dial error when every address refused the
	// connection: nothing listens there yet (a node still starting). It
	// also matches ErrUnavailable.
	ErrNoListener = errors.New("no node listens")
	// ErrFenced: the master was fenced or demoted while the put waited for
	// its slaves; the message is stored on that node but may be cut.
	ErrFenced = errors.New("master fenced")
	// ErrNoSpace: the master's disk is full.
	ErrNoSpace = errors.New("no space on the master")
	// ErrUnauthenticated: the node refused the API token (or its absence).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrProtocol: the node does not serve the producer stream, or ended it
	// for a protocol error.
	ErrProtocol = errors.New("producer stream protocol error")
	// ErrInternal: the put failed on the node.
	ErrInternal = errors.New("put failed on the node")
	// ErrClosed: the producer is closed.
	ErrClosed = errors.New("producer closed")
)

// PutError is the error of one message.
type PutError struct {
	Storage Storage
	// Kind is one of the errors above (ErrTooLarge, ErrNoMaster, ...), or a
	// context error when the caller's context ended.
	Kind error
	// Node is the node that answered, when one did.
	Node string
	// Message is the node's explanation, or the local one.
	Message string
	// Offset is where a fenced master stored the message (ErrFenced).
	Offset int64
}

func (e *PutError) Error() string {
	s := fmt.Sprintf("put: %v (%s)", e.Kind, e.Storage)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Node != "" {
		s += " [node " + e.Node + "]"
	}
	return s
}

// Is matches ErrNotStored or ErrMayBeStored by Storage.
func (e *PutError) Is(target error) bool {
	switch target {
	case ErrNotStored:
		return e.Storage == NotStored
	case ErrMayBeStored:
		return e.Storage == MaybeStored
	}
	return false
}

// Unwrap is Kind.
func (e *PutError) Unwrap() error { return e.Kind }
