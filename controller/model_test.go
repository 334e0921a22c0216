package controller

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// modelNode is a broker in the model: its log holds message ids, one per
// offset, and it is alive while its lease lasts.
type modelNode struct {
	id    int64
	alive bool
	epoch int32
	log   []int
}

// world drives the real state machine with a simple model of the brokers
// that behaves as core does: a master appends, a put is acknowledged once
// every member of the confirmed in-sync set holds it, a slave copies the
// master's log after cutting its divergent tail, and the master proposes
// to add a slave only when it holds everything up to the confirm offset.
type world struct {
	t       *testing.T
	rng     *rand.Rand
	opt     Options
	s       State
	nodes   []*modelNode
	acked   map[int]int // offset -> message id acknowledged (PUT_OK)
	nextMsg int
	masters map[int32]int64 // epoch -> master elected at it
	counts  map[string]int
	trace   []string
}

func (w *world) node(id int64) *modelNode {
	for _, n := range w.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	tail := w.trace[max(0, len(w.trace)-15):]
	w.t.Fatalf("%s\nlast steps:\n  %s", fmt.Sprintf(format, args...), fmtLines(tail))
}

func fmtLines(l []string) string {
	out := ""
	for i, s := range l {
		if i > 0 {
			out += "\n  "
		}
		out += s
	}
	return out
}

// step applies ev to the machine and checks every safety property.
func (w *world) step(ev Event) Decision {
	w.t.Helper()
	prev := w.s.Clone()
	next, d := Step(w.s, ev, w.opt)
	w.trace = append(w.trace, fmt.Sprintf("%v -> %v master=%d epoch=%d set=%v/%d err=%v", ev, d.Outcome, d.Master, d.MasterEpoch, d.Set, d.SetEpoch, d.Err))
	w.counts[d.Outcome.String()]++
	g, pg := next.Group, prev.Group
	if err := g.Validate(); err != nil {
		w.fail("invalid state: %v", err)
	}
	if g.Master != NoMaster && !g.InSet(g.Master) {
		w.fail("in-sync set %v lacks master %d", g.SyncStateSet, g.Master)
	}
	if g.MasterEpoch < pg.MasterEpoch || g.SyncStateSetEpoch < pg.SyncStateSetEpoch {
		w.fail("an epoch went back: %+v -> %+v", pg, g)
	}
	if !slices.Equal(g.SyncStateSet, pg.SyncStateSet) && g.SyncStateSetEpoch <= pg.SyncStateSetEpoch {
		w.fail("set changed without a new set epoch: %+v -> %+v", pg, g)
	}
	if (g.Master != pg.Master || g.MasterEpoch != pg.MasterEpoch) && g.Master != NoMaster {
		// An election.
		if d.Outcome != Elected {
			w.fail("master changed with outcome %v", d.Outcome)
		}
		if g.MasterEpoch <= pg.MasterEpoch {
			w.fail("epoch %d not above %d", g.MasterEpoch, pg.MasterEpoch)
		}
		if m, ok := w.masters[g.MasterEpoch]; ok && m != g.Master {
			w.fail("two masters at epoch %d: %d and %d", g.MasterEpoch, m, g.Master)
		}
		w.masters[g.MasterEpoch] = g.Master
		first := pg.MasterEpoch == 0
		if !first && !d.DataLoss && !pg.InSet(g.Master) {
			w.fail("elected %d outside the confirmed set %v", g.Master, pg.SyncStateSet)
		}
		if d.DataLoss && pg.InSet(g.Master) {
			w.fail("data loss reported for member %d", g.Master)
		}
		if !prev.Nodes[g.Master].Alive && !next.Nodes[g.Master].Alive {
			w.fail("elected dead node %d", g.Master)
		}
		nm := w.node(g.Master)
		if !d.DataLoss {
			for off, msg := range w.acked {
				if off >= len(nm.log) || nm.log[off] != msg {
					w.fail("new master %d lacks acknowledged message %d at offset %d (log %v)", g.Master, msg, off, nm.log)
				}
			}
		} else {
			for off, msg := range w.acked {
				if off >= len(nm.log) || nm.log[off] != msg {
					delete(w.acked, off)
				}
			}
		}
		nm.epoch = g.MasterEpoch
	}
	if d.Outcome == Rejected && !g.Equal(pg) {
		w.fail("rejected event changed the group")
	}
	w.s = next
	return d
}

// confirm is the highest offset every member of the confirmed set holds
// in agreement with the master.
func (w *world) confirm() int {
	m := w.node(w.s.Group.Master)
	c := len(m.log)
	for _, id := range w.s.Group.SyncStateSet {
		c = min(c, common(w.node(id).log, m.log))
	}
	return c
}

func common(a, b []int) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func (w *world) act() {
	g := w.s.Group
	r := w.rng
	n := w.nodes[r.IntN(len(w.nodes))]
	var m *modelNode
	if g.Master != NoMaster {
		m = w.node(g.Master)
	}
	switch k := r.IntN(100); {
	case k < 8: // a dead node comes back
		if !n.alive {
			n.alive = true
			w.step(NodeRegistered{Node: Node{BrokerID: n.id, Epoch: n.epoch, MaxOffset: int64(len(n.log))}})
		}
	case k < 14: // a lease expires
		if n.alive {
			n.alive = false
			w.step(LeaseExpired{BrokerID: n.id})
		}
	case k < 40: // the master takes puts
		if m != nil {
			for range 1 + r.IntN(3) {
				w.nextMsg++
				m.log = append(m.log, w.nextMsg)
			}
		}
	case k < 60: // a slave replicates: cut the divergent tail, copy some
		if m != nil && n != m && n.alive {
			n.log = n.log[:common(n.log, m.log)]
			upto := min(len(m.log), len(n.log)+r.IntN(8))
			n.log = append(n.log, m.log[len(n.log):upto]...)
			n.epoch = g.MasterEpoch
		}
	case k < 70: // the master proposes to add a caught-up slave
		if m != nil && n != m && n.alive && !g.InSet(n.id) && common(n.log, m.log) >= w.confirm() {
			w.step(AlterSyncStateSet{Master: m.id, MasterEpoch: g.MasterEpoch, SetEpoch: g.SyncStateSetEpoch, Set: append(slices.Clone(g.SyncStateSet), n.id)})
		}
	case k < 76: // the master proposes to drop a member
		if m != nil && n != m && g.InSet(n.id) {
			set := slices.DeleteFunc(slices.Clone(g.SyncStateSet), func(id int64) bool { return id == n.id })
			w.step(AlterSyncStateSet{Master: m.id, MasterEpoch: g.MasterEpoch, SetEpoch: g.SyncStateSetEpoch, Set: set})
		}
	case k < 82: // a stale or foreign proposal: must be refused
		set := []int64{n.id}
		if r.IntN(2) == 0 {
			set = append(set, w.nodes[r.IntN(len(w.nodes))].id)
		}
		ev := AlterSyncStateSet{Master: n.id, MasterEpoch: g.MasterEpoch - int32(r.IntN(2)), SetEpoch: g.SyncStateSetEpoch - int32(r.IntN(2)), Set: set}
		if n.id == g.Master && ev.MasterEpoch == g.MasterEpoch && ev.SetEpoch == g.SyncStateSetEpoch {
			ev.SetEpoch-- // make it stale: a legitimate one would be the master's own choice
		}
		if d := w.step(ev); d.Outcome != Rejected {
			w.fail("illegitimate proposal %v accepted", ev)
		}
	case k < 90: // a heartbeat
		if n.alive {
			w.step(Heartbeat{BrokerID: n.id, Epoch: n.epoch, MaxOffset: int64(len(n.log))})
		}
	case k < 93: // the master demotes itself
		if m != nil {
			w.step(MasterDemoted{BrokerID: m.id, Epoch: g.MasterEpoch})
		}
	}
	// Acknowledge every put that the whole confirmed set holds.
	g = w.s.Group
	if g.Master != NoMaster {
		m = w.node(g.Master)
		for off := range w.confirm() {
			if _, ok := w.acked[off]; !ok {
				w.acked[off] = m.log[off]
			}
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int, opt Options) map[string]int {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &world{t: t, rng: rng, opt: opt, s: NewState(), acked: map[int]int{}, masters: map[int32]int64{}, counts: map[string]int{}}
	for i := range 3 + rng.IntN(3) {
		w.nodes = append(w.nodes, &modelNode{id: int64(i)})
	}
	for _, n := range w.nodes {
		if rng.IntN(4) > 0 {
			n.alive = true
			w.step(NodeRegistered{Node: Node{BrokerID: n.id}})
		}
	}
	for range steps {
		w.act()
	}
	return w.counts
}

// TestModelSafety steps the machine through seeded random histories and
// checks, after every step: at most one master per epoch, epochs strictly
// increasing at each election, the elected node a member of the confirmed
// set (unless unclean), the set always holding the master, and every
// acknowledged message held by each newly elected master.
func TestModelSafety(t *testing.T) {
	seeds, steps := uint64(150), 400
	if testing.Short() {
		seeds = 40
	}
	if v := os.Getenv("CONTROLLER_MODEL_SEEDS"); v != "" { // long runs
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CONTROLLER_MODEL_SEEDS=%q: %v", v, err)
		}
		seeds = n
	}
	for _, opt := range []Options{{}, {UncleanElection: true}} {
		total := map[string]int{}
		for seed := range seeds {
			t.Run(fmt.Sprintf("unclean=%v/seed=%d", opt.UncleanElection, seed), func(t *testing.T) {
				for k, v := range runModel(t, seed, steps, opt) {
					total[k] += v
				}
			})
		}
		t.Logf("unclean=%v outcomes over %d seeds: %v", opt.UncleanElection, seeds, total)
		// The histories must exercise every path, or the test proves nothing.
		for _, o := range []Outcome{Elected, NoMasterLeft, SetAccepted, Rejected, Noted} {
			if total[o.String()] == 0 {
				t.Errorf("unclean=%v: no %v outcome in %d seeds", opt.UncleanElection, o, seeds)
			}
		}
	}
}
