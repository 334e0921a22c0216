package rpcerr

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrPluginShutdown is returned by every external-plugin call once the plugin
// process is gone (crashed, killed or closed underneath the host).
// sdk/plugin exports it.
var ErrPluginShutdown = errors.New("plugin: plugin process is gone")

// ErrorDomain is the ErrorInfo domain of replicator sentinel errors.
const ErrorDomain = "replicator.plugin"

// ErrorCode maps one sentinel error to a gRPC code and a reason string. Codes
// may repeat within a table; the reason tells the sentinels apart. Each kind's
// package keeps one table (its sentinels), round-tripped by a test.
type ErrorCode struct {
	Err    error
	Code   codes.Code
	Reason string
}

// RemoteError is an error that came back from a plugin: its text is the
// plugin's message; errors.Is finds the sentinel it carried.
type RemoteError struct {
	Msg      string
	Sentinel error // nil when the error matched no table entry
	Code     codes.Code
}

func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *RemoteError) Unwrap() error { return e.Sentinel }

// Lookup finds the table entry for err (errors.Is, first match).
func Lookup(table []ErrorCode, err error) (ErrorCode, bool) {
	for _, e := range table {
		if errors.Is(err, e.Err) {
			return e, true
		}
	}
	return ErrorCode{}, false
}

// Decode turns (code, reason, message) from the wire back into an error.
// The reason picks the sentinel; a code alone picks the first entry with that
// code; Unavailable means the plugin is gone (ErrPluginShutdown).
func Decode(table []ErrorCode, code codes.Code, reason, msg string) error {
	if code == codes.OK {
		return nil
	}
	if reason != "" {
		for _, e := range table {
			if e.Reason == reason {
				return &RemoteError{Msg: msg, Sentinel: e.Err, Code: code}
			}
		}
	}
	switch code {
	case codes.Canceled:
		return &RemoteError{Msg: msg, Sentinel: context.Canceled, Code: code}
	case codes.DeadlineExceeded:
		return &RemoteError{Msg: msg, Sentinel: context.DeadlineExceeded, Code: code}
	case codes.Unavailable:
		return &RemoteError{Msg: "plugin: plugin process is gone: " + msg, Sentinel: ErrPluginShutdown, Code: code}
	}
	for _, e := range table {
		if e.Code == code {
			return &RemoteError{Msg: msg, Sentinel: e.Err, Code: code}
		}
	}
	return &RemoteError{Msg: msg, Code: code}
}

// Encode gives the wire form of err: its table code and reason, or Unknown.
func Encode(table []ErrorCode, err error) (codes.Code, string) {
	if e, ok := Lookup(table, err); ok {
		return e.Code, e.Reason
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled, ""
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, ""
	}
	return codes.Unknown, ""
}

// ToStatus converts err into a gRPC status error carrying its code and, for
// a table sentinel, an ErrorInfo with the reason. nil stays nil.
func ToStatus(table []ErrorCode, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		var re *RemoteError
		if !errors.As(err, &re) {
			return err
		}
	}
	code, reason := Encode(table, err)
	st := status.New(code, err.Error())
	if reason != "" {
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// FromStatus converts a gRPC error back into a sentinel-carrying error.
// Errors that are not gRPC statuses pass through unchanged.
func FromStatus(table []ErrorCode, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			reason = info.Reason
		}
	}
	return Decode(table, st.Code(), reason, st.Message())
}
