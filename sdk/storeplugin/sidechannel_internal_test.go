package storeplugin

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// TestPluginSideFrameVersion: a plugin refuses, before dialing, a host that
// frames side channels otherwise, and a host refuses a plugin that answers
// with another layout (a plugin of an older SDK answers 0); both come out
// as "older SDK", which sends the host to the gRPC streams.
func TestPluginSideFrameVersion(t *testing.T) {
	s := newServer(func(context.Context, OpenRequest) (store.Store, error) { return nil, nil }, nil)
	for _, call := range []func(uint32) error{
		func(v uint32) error {
			_, err := s.AppendChannel(context.Background(), &storev1.AppendChannelRequest{Socket: "/nonexistent/s", FrameVersion: v})
			return err
		},
		func(v uint32) error {
			_, err := s.ReadChannel(context.Background(), &storev1.ReadChannelRequest{Socket: "/nonexistent/s", FrameVersion: v})
			return err
		},
	} {
		err := call(0)
		if status.Code(err) != codes.FailedPrecondition || !olderSDK(fmt.Errorf("wrapped: %w", err)) {
			t.Fatalf("frame version 0: %v", err)
		}
	}
	if err := checkFrameVersion(side.FrameVersion, side.FrameVersion); err != nil {
		t.Fatal(err)
	}
	// The read channel takes no ring; a plugin that answers the ring
	// request without the bit is refused like an older one.
	if _, err := s.ReadChannel(context.Background(), &storev1.ReadChannelRequest{Socket: "/nonexistent/s", FrameVersion: side.FrameVersion | ringVersionBit}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("read channel asked for a ring: %v", err)
	}
	if err := checkFrameVersion(side.FrameVersion, side.FrameVersion|ringVersionBit); !olderSDK(fmt.Errorf("storeplugin: side channel: %w", err)) {
		t.Fatalf("a plugin answering without the ring: %v", err)
	}
	if err := checkFrameVersion(0, side.FrameVersion); !olderSDK(fmt.Errorf("storeplugin: side channel: %w", err)) {
		t.Fatalf("a plugin answering 0: %v", err)
	}
	if olderSDK(fmt.Errorf("x: %w", status.Error(codes.Unavailable, "gone"))) {
		t.Fatal("Unavailable taken for an older SDK")
	}
}
