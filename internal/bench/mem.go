package bench

import (
	"sync"
	"time"
)

// memGroup is a set of processes whose memory is summed (a node, or the
// plugin processes of a node).
type memGroup struct {
	pids func() []int
	dst  *procMem
}

// memSampler samples the resident memory of process groups every RSSEvery
// until stop.
type memSampler struct {
	groups []memGroup
	mem    memory
	stopc  chan struct{}
	wg     sync.WaitGroup
}

// pidsOf returns a fixed pid list (0 = this process).
func pidsOf(pids ...int) func() []int { return func() []int { return pids } }

// childrenPids returns the children of pid at each call.
func childrenPids(pid int) func() []int { return func() []int { return childrenOf(pid) } }

// memGroups names the processes of each group; nil = no such group.
type memGroups struct {
	master, slave, masterPlugin, slavePlugin, self func() []int
}

// startMem resets the peaks of every process in g and samples them.
func startMem(g memGroups) *memSampler {
	s := &memSampler{stopc: make(chan struct{})}
	add := func(f func() []int, dst *procMem) {
		if f != nil {
			s.groups = append(s.groups, memGroup{pids: f, dst: dst})
		}
	}
	add(g.master, &s.mem.master)
	add(g.slave, &s.mem.slave)
	add(g.masterPlugin, &s.mem.masterPlugin)
	add(g.slavePlugin, &s.mem.slavePlugin)
	add(g.self, &s.mem.self)
	for _, gr := range s.groups {
		for _, pid := range gr.pids() {
			resetPeak(pid) // best effort: VmHWM then covers the measured phase only
		}
	}
	s.sample(false)
	s.wg.Go(func() {
		t := time.NewTicker(RSSEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
				s.sample(false)
			}
		}
	})
	return s
}

// sample reads every group once; final also takes VmHWM.
func (s *memSampler) sample(final bool) {
	for _, g := range s.groups {
		var sum memSample
		n := 0
		for _, pid := range g.pids() {
			m, err := readMem(pid)
			if err != nil {
				continue
			}
			n++
			sum.hwm += m.hwm
			sum.rss += m.rss
			sum.anon += m.anon
			sum.file += m.file
		}
		if n == 0 {
			continue
		}
		d := g.dst
		if !d.valid {
			d.valid = true
			d.startAnon = sum.anon
		}
		d.anon, d.file = max(d.anon, sum.anon), max(d.file, sum.file)
		d.hwm = max(d.hwm, sum.rss)
		if final {
			d.hwm = max(d.hwm, sum.hwm)
		}
	}
}

// stop ends the sampling (after a last sample with VmHWM) and returns what
// it saw. The processes must still run.
func (s *memSampler) stop() memory {
	close(s.stopc)
	s.wg.Wait()
	s.sample(true)
	return s.mem
}
