package bench

import (
	"fmt"
	"strings"
)

// CPU time per message: on a shared machine the rate of a point moves with
// what else runs, while the CPU each message costs each process moves much
// less, so a change of the put path is judged by both.

// cpuSample is the CPU time (clock ticks) of the process groups of a
// point: the master and the slave daemons (with their plugin processes) and
// this process (the producers; in library runs also the master and slave).
type cpuSample struct {
	master, slave, self int64
	hasMaster, hasSlave bool
	hasSelf             bool
}

// readCPU reads the CPU ticks of the groups in g and of this process.
func readCPU(g memGroups) cpuSample {
	var s cpuSample
	sum := func(fs ...func() []int) (int64, bool) {
		var t int64
		ok := false
		for _, f := range fs {
			if f == nil {
				continue
			}
			for _, pid := range f() {
				if n, err := cpuTicks(pid); err == nil {
					t += n
					ok = true
				}
			}
		}
		return t, ok
	}
	s.master, s.hasMaster = sum(g.master, g.masterPlugin)
	s.slave, s.hasSlave = sum(g.slave, g.slavePlugin)
	if n, err := cpuTicks(0); err == nil {
		s.self, s.hasSelf = n, true
	}
	return s
}

// cpuPerMsg is CPU microseconds per message of each group; negative where
// it was not measured (ok: the run measured CPU at all).
type cpuPerMsg struct {
	master, slave, self float64
	ok                  bool
}

// perMessage is the CPU from before to s divided by msgs.
func (s cpuSample) perMessage(before cpuSample, msgs int64) cpuPerMsg {
	out := cpuPerMsg{master: -1, slave: -1, self: -1, ok: true}
	if msgs <= 0 {
		return out
	}
	us := func(a, b int64) float64 { return float64(a-b) / clockTicks * 1e6 / float64(msgs) }
	if s.hasMaster && before.hasMaster {
		out.master = us(s.master, before.master)
	}
	if s.hasSlave && before.hasSlave {
		out.slave = us(s.slave, before.slave)
	}
	if s.hasSelf && before.hasSelf {
		out.self = us(s.self, before.self)
	}
	return out
}

// medianCPU is the median over runs of each group's figure (nil where no
// run measured it).
func medianCPU(runs []run, f func(cpuPerMsg) float64) *float64 {
	var xs []float64
	for _, x := range runs {
		if v := f(x.cpu); x.cpu.ok && v >= 0 {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	return ptr(median(xs))
}

// cpuText is the progress line's CPU part: "; CPU µs/msg master M slave S
// producers P".
func (r Result) cpuText() string {
	var parts []string
	add := func(name string, v *float64) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, *v))
		}
	}
	add("master", r.MasterCPUPerMsg)
	add("slave", r.SlaveCPUPerMsg)
	name := "producers"
	if r.Via == ViaLibrary {
		name = "process"
	}
	add(name, r.ProcessCPUPerMsg)
	if len(parts) == 0 {
		return ""
	}
	return "; CPU µs/msg " + strings.Join(parts, " ")
}

// catchCPUText is a catch-up run's progress line CPU part: "; CPU ns/KB
// master M slave S", empty when not measured.
func (x run) catchCPUText() string {
	if !x.hasCatchCPU || x.cpu.master < 0 || x.cpu.slave < 0 {
		return ""
	}
	return fmt.Sprintf("; CPU ns/KB master %.0f slave %.0f", x.cpu.master*1000, x.cpu.slave*1000)
}
