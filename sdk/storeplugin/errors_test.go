package storeplugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/internal/rpcerr"
	"github.com/replicatorhq/replicator/sdk/store"
)

// TestPluginStoreErrorTable round-trips every sentinel of the table through
// both wire forms: a gRPC status (unary calls) and an Error message (append
// acks).
func TestPluginStoreErrorTable(t *testing.T) {
	reasons := map[string]bool{}
	for _, e := range errorTable {
		if reasons[e.Reason] {
			t.Fatalf("reason %s used twice", e.Reason)
		}
		reasons[e.Reason] = true
		wrapped := fmt.Errorf("segment 42, offset 7: %w", e.Err)

		st := toStatus(wrapped)
		s, ok := status.FromError(st)
		if !ok || s.Code() != e.Code {
			t.Fatalf("%v: status code %v, want %v", e.Err, s.Code(), e.Code)
		}
		back := fromStatus(st)
		if !errors.Is(back, e.Err) {
			t.Fatalf("%v: came back as %v", e.Err, back)
		}
		if back.Error() != wrapped.Error() {
			t.Fatalf("%v: message %q, want %q", e.Err, back.Error(), wrapped.Error())
		}
		if got := decodeError(encodeError(wrapped)); !errors.Is(got, e.Err) || got.Error() != wrapped.Error() {
			t.Fatalf("%v: ack error came back as %v", e.Err, got)
		}
	}
	// Every store sentinel is in the table.
	for _, err := range []error{store.ErrClosed, store.ErrOffsetMismatch, store.ErrOffsetOutOfRange,
		store.ErrSegmentOverflow, store.ErrNotBoundary, store.ErrCorrupt, store.ErrMessageTooLarge,
		store.ErrInvalidTopic, store.ErrFlushDiskTimeout} {
		if _, ok := rpcerr.Lookup(errorTable, err); !ok {
			t.Fatalf("%v is missing from the error table", err)
		}
	}
	// Bare codes: the first entry of the code, Unavailable = plugin gone,
	// context errors, and unknown errors that stay unknown.
	for _, c := range []struct {
		code codes.Code
		want error
	}{
		{codes.OutOfRange, store.ErrOffsetOutOfRange},
		{codes.DataLoss, store.ErrCorrupt},
		{codes.FailedPrecondition, store.ErrOffsetMismatch},
		{codes.Unavailable, ErrPluginShutdown},
		{codes.Canceled, context.Canceled},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
	} {
		if got := fromStatus(status.Error(c.code, "x")); !errors.Is(got, c.want) {
			t.Fatalf("bare %v: %v, want %v", c.code, got, c.want)
		}
	}
	plain := errors.New("disk on fire")
	got := fromStatus(toStatus(plain))
	for _, e := range errorTable {
		if errors.Is(got, e.Err) {
			t.Fatalf("an unknown error came back as %v", e.Err)
		}
	}
	if got.Error() != plain.Error() {
		t.Fatalf("unknown error message %q", got.Error())
	}
	if toStatus(nil) != nil || fromStatus(nil) != nil || encodeError(nil) != nil || decodeError(nil) != nil {
		t.Fatal("nil must stay nil")
	}
}
