package core

import (
	"context"
	"slices"
)

// SyncStateSetConfirmer confirms a change of a master's SyncStateSet (the
// in-sync replicas, RocketMQ 5's AlterSyncStateSet to the controller)
// before it takes effect. Propose returns the set that takes effect, which
// may differ from newSet (the controller's answer); an error leaves the
// current set in place. While a proposal is in flight the master waits for
// the union of the current and the proposed set (RocketMQ #5663). Propose
// is called from one goroutine at a time; ctx ends when the master closes.
type SyncStateSetConfirmer interface {
	Propose(ctx context.Context, epoch int32, newSet []int64) ([]int64, error)
}

// sortedIDs returns the keys of set in ascending order.
func sortedIDs(set map[int64]struct{}) []int64 {
	ids := make([]int64, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
