package core

import (
	"container/heap"
	"slices"
	"sort"
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
//
// A batch of puts (Master.PutBatch) is one waiter holding the next offsets
// of its records in order: it sits in the heap under its first offset not
// covered yet, moves on (heap.Fix) as quorums cover part of it, and is
// released (one channel close) when the last is covered. Each record still
// counts as covered by the first quorum that reached it, as if it had
// waited alone, with one channel, one timer and one wake-up for the batch.

// syncWaiter is one SYNC_MASTER put, or batch of puts, waiting for acks.
type syncWaiter struct {
	next    int64         // offs[covered]: the first next offset not covered yet (the heap key)
	offs    []int64       // the records' next offsets, ascending: an ack >= offs[i] covers record i
	covered int           // records covered so far (a prefix of offs)
	index   int           // position in the heap; -1 once popped or removed
	done    chan struct{} // closed when an ack quorum covers every record
	one     [1]int64      // offs of a single put
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
	w.one[0] = next
	w.offs = w.one[:]
	heap.Push(&g.queue, w)
	return w
}

// addBatch registers one waiter for the records ending at offs (ascending,
// not empty; the waiter keeps the slice). It returns nil when the current
// quorum already covers every record; otherwise the waiter's covered count
// says how many the quorum covers already.
func (g *groupTransfer) addBatch(offs []int64) *syncWaiter {
	if g.quorum >= offs[len(offs)-1] {
		return nil
	}
	w := &syncWaiter{offs: offs, done: make(chan struct{})}
	w.advance(g.quorum)
	heap.Push(&g.queue, w)
	return w
}

// advance counts the records q covers; it reports whether all are.
func (w *syncWaiter) advance(q int64) bool {
	if w.covered < len(w.offs) && w.offs[w.covered] <= q {
		// offs is ascending: find the first record q does not cover.
		rest := w.offs[w.covered:]
		w.covered += sort.Search(len(rest), func(i int) bool { return rest[i] > q })
	}
	if w.covered == len(w.offs) {
		return true
	}
	w.next = w.offs[w.covered]
	return false
}

// remove takes w out of the queue after a timeout or cancellation. It
// reports false when w was released (all covered) before it could be
// removed; w.covered is final either way.
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

// release sets the quorum ack to q and releases every waiter it covers
// entirely, counting the records it covers of the others. It returns the
// number released.
func (g *groupTransfer) release(q int64) int {
	g.quorum = q
	n := 0
	for len(g.queue) > 0 && g.queue[0].next <= g.quorum {
		w := g.queue[0]
		if !w.advance(q) {
			heap.Fix(&g.queue, 0) // part of a batch is covered: wait for the rest
			continue
		}
		heap.Pop(&g.queue)
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
