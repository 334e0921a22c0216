package core

import (
	"container/heap"
	"slices"
)

// Group transfer (RocketMQ's GroupTransferService), rebuilt without polling.
//
// A SYNC_MASTER put waits until SyncAcks distinct slave connections have
// acknowledged the offset just after its record. The master keeps the waiting
// puts in a min-heap ordered by that offset. Every ack recomputes the quorum
// ack — the SyncAcks-th highest ack among the connected slaves — and pops
// exactly the waiters it covers, so releasing costs O(released · log n) and a
// waiter is released by the ack that covers it, never by a timer tick.
// Timeouts are per waiter (each put's own timer); a timed-out waiter removes
// itself from the heap in O(log n).

// syncWaiter is one SYNC_MASTER put waiting for acks.
type syncWaiter struct {
	next  int64         // the record's next offset: an ack >= next covers it
	index int           // position in the heap; -1 once popped or removed
	done  chan struct{} // closed when an ack quorum covers next
}

// waitQueue is a min-heap of waiters by next offset.
type waitQueue []*syncWaiter

func (q waitQueue) Len() int           { return len(q) }
func (q waitQueue) Less(i, j int) bool { return q[i].next < q[j].next }
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *waitQueue) Push(x any) {
	w := x.(*syncWaiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waitQueue) Pop() any {
	old := *q
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.index = -1
	*q = old[:n-1]
	return w
}

// groupTransfer tracks waiting puts. It is not safe for concurrent use: the
// master guards it with its mutex.
type groupTransfer struct {
	acks   int       // SyncAcks
	quorum int64     // SyncAcks-th highest counted ack of the connected slaves; -1 if fewer
	queue  waitQueue // waiting puts
	buf    []int64   // scratch for quorum computation
}

func newGroupTransfer(acks int) *groupTransfer {
	return &groupTransfer{acks: acks, quorum: -1}
}

// add registers a waiter for next. It returns nil when the current quorum
// already covers next.
func (g *groupTransfer) add(next int64) *syncWaiter {
	if g.quorum >= next {
		return nil
	}
	w := &syncWaiter{next: next, done: make(chan struct{})}
	heap.Push(&g.queue, w)
	return w
}

// remove takes w out of the queue after a timeout or cancellation. It
// reports false when w was released (covered) before it could be removed.
func (g *groupTransfer) remove(w *syncWaiter) bool {
	if w.index < 0 {
		return false
	}
	heap.Remove(&g.queue, w.index)
	return true
}

// update recomputes the quorum from the connected slaves' counted acks and
// releases every waiter it covers. It returns the number released.
func (g *groupTransfer) update(acks []int64) int {
	return g.release(nthHighest(acks, g.acks, &g.buf))
}

// release sets the quorum ack to q and releases every waiter it covers. It
// returns the number released.
func (g *groupTransfer) release(q int64) int {
	g.quorum = q
	n := 0
	for len(g.queue) > 0 && g.queue[0].next <= g.quorum {
		w := heap.Pop(&g.queue).(*syncWaiter)
		close(w.done)
		n++
	}
	return n
}

// nthHighest returns the n-th highest value of acks (n >= 1), or -1 when
// there are fewer than n values. buf is scratch space reused across calls.
func nthHighest(acks []int64, n int, buf *[]int64) int64 {
	if len(acks) < n {
		return -1
	}
	if n == 1 {
		return slices.Max(acks)
	}
	b := append((*buf)[:0], acks...)
	*buf = b
	slices.Sort(b)
	return b[len(b)-n]
}
