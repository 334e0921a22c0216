package controller

import "testing"

// BenchmarkStepElection measures one election over a group of 5 with a
// full in-sync set (the cost a store pays per attempt, before etcd).
func BenchmarkStepElection(b *testing.B) {
	var nodes []Node
	for id := int64(1); id <= 5; id++ {
		nodes = append(nodes, nd(id, 3, 100*id))
	}
	s := group(1, 3, []int64{1, 2, 3, 4, 5}, 7, nodes)
	b.ReportAllocs()
	for b.Loop() {
		if _, d := Step(s, LeaseExpired{BrokerID: 1}, Options{}); d.Outcome != Elected {
			b.Fatal(d)
		}
	}
}

// BenchmarkStepHeartbeat measures the common event: a heartbeat with a
// master in place (no change to persist).
func BenchmarkStepHeartbeat(b *testing.B) {
	s := group(1, 3, []int64{1, 2, 3}, 7, []Node{nd(1, 3, 100), nd(2, 3, 100), nd(3, 3, 100)})
	b.ReportAllocs()
	for b.Loop() {
		if _, d := Step(s, Heartbeat{BrokerID: 2, Epoch: 3, MaxOffset: 200}, Options{}); d.Changed {
			b.Fatal(d)
		}
	}
}
