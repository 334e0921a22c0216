package storeplugin

import (
	"google.golang.org/grpc/codes"

	"github.com/replicatorhq/replicator/sdk/internal/rpcerr"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// ErrPluginShutdown is plugin.ErrPluginShutdown: every call on a Client whose
// plugin process is gone fails with it.
var ErrPluginShutdown = plugin.ErrPluginShutdown

// errorTable is THE mapping between the store sentinels and gRPC codes. The
// first entry of a code is the one a bare code (no reason) decodes to.
var errorTable = []rpcerr.ErrorCode{
	{Err: store.ErrOffsetOutOfRange, Code: codes.OutOfRange, Reason: "OFFSET_OUT_OF_RANGE"},
	{Err: store.ErrCorrupt, Code: codes.DataLoss, Reason: "CORRUPT"},
	{Err: store.ErrOffsetMismatch, Code: codes.FailedPrecondition, Reason: "OFFSET_MISMATCH"},
	{Err: store.ErrSegmentOverflow, Code: codes.FailedPrecondition, Reason: "SEGMENT_OVERFLOW"},
	{Err: store.ErrNotBoundary, Code: codes.InvalidArgument, Reason: "NOT_BOUNDARY"},
	{Err: store.ErrInvalidTopic, Code: codes.InvalidArgument, Reason: "INVALID_TOPIC"},
	{Err: store.ErrMessageTooLarge, Code: codes.ResourceExhausted, Reason: "MESSAGE_TOO_LARGE"},
	{Err: store.ErrFlushDiskTimeout, Code: codes.DeadlineExceeded, Reason: "FLUSH_DISK_TIMEOUT"},
	{Err: store.ErrClosed, Code: codes.Aborted, Reason: "CLOSED"},
	{Err: plugin.ErrPluginShutdown, Code: codes.Unavailable, Reason: "PLUGIN_SHUTDOWN"},
}

func toStatus(err error) error   { return rpcerr.ToStatus(errorTable, err) }
func fromStatus(err error) error { return rpcerr.FromStatus(errorTable, err) }

func encodeError(err error) *storev1.Error {
	if err == nil {
		return nil
	}
	code, reason := rpcerr.Encode(errorTable, err)
	return &storev1.Error{Code: int32(code), Reason: reason, Message: err.Error()}
}

func decodeError(e *storev1.Error) error {
	if e == nil {
		return nil
	}
	return rpcerr.Decode(errorTable, codes.Code(e.Code), e.Reason, e.Message)
}
