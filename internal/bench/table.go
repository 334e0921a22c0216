package bench

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable writes results as a text table, after a line with the limits
// they were measured against.
func WriteTable(w io.Writer, rs []Result) error {
	if len(rs) > 0 {
		r := rs[0]
		fmt.Fprintf(w, "limits (same run): loopback TCP %s MB/s (32 KiB frames); 8 B round trip p50 %s ms, p99 %s ms; disk %s MB/s sequential (fdatasync every 4 MiB), %s fdatasync/s (4 KiB); page-cache fill %s MB/s (fresh file, no sync)",
			num(r.LoopbackMBPerS, 0), num(r.RTTP50Ms, 3), num(r.RTTP99Ms, 3), num(r.DiskMBPerS, 0), num(r.FdatasyncPS, 0), num(r.PageWriteMBPerS, 0))
		if r.RTTXProcP50Ms != nil {
			fmt.Fprintf(w, "; 8 B round trip across processes p50 %s ms, p99 %s ms (a put through the daemons crosses 1 such link, a sync put 2: floor %s ms)",
				num(r.RTTXProcP50Ms, 3), num(r.RTTXProcP99Ms, 3), num(ptr(2**r.RTTXProcP50Ms), 3))
		}
		if r.RTTChainP50Ms != nil {
			fmt.Fprintf(w, "; along 3 processes (relay, echo) p50 %s ms, p99 %s ms", num(r.RTTChainP50Ms, 3), num(r.RTTChainP99Ms, 3))
		}
		fmt.Fprint(w, "\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tvia\tstore\tproducers\tmsgs/s\tMB/s\tp50 ms\tp99 ms\tp99.9 ms\tp50 ÷ rtt / across / floor / chain\tlag p99 ms\tlimit MB/s\tof limit\tof disk\tof page fill\tCPU µs/msg master / slave / this\tRSS MiB master / slave (anon)\t")
	for _, r := range rs {
		via := r.Via
		if r.Protocol != "" && r.Protocol != ProtocolClassic {
			via += " " + r.Protocol
		}
		prod := "-"
		if r.Producers != nil {
			prod = strconv.Itoa(*r.Producers)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Scenario, via, r.Store, prod, num(r.MsgsPerS, 0), num(r.MBPerS, 1),
			num(r.P50Ms, 3), num(r.P99Ms, 3), num(r.P999Ms, 3), floors(r), num(r.LagP99Ms, 3),
			num(r.LimitMBPerS, 0), pct(r.RatioToLimit), pct(r.RatioToDisk), pct(r.RatioToPageWrite), cpu(r), rss(r))
	}
	return tw.Flush()
}

func num(p *float64, prec int) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'f', prec, 64)
}

func pct(p *float64) string {
	if p == nil {
		return "-"
	}
	v := 100 * *p
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "%"
}

func mibs(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p>>20, 10)
}

// rss renders peak RSS in MiB, the peak anonymous part (heap, stacks) in
// parentheses: the rest is mapped commit-log pages.
func rss(r Result) string {
	one := func(hwm, anon *int64) string {
		if hwm == nil {
			return "-"
		}
		return mibs(hwm) + "(" + mibs(anon) + ")"
	}
	var s string
	switch {
	case r.MasterPeakRSS != nil || r.SlavePeakRSS != nil:
		s = one(r.MasterPeakRSS, r.MasterPeakAnon) + " / " + one(r.SlavePeakRSS, r.SlavePeakAnon)
	case r.ProcessPeakRSS != nil:
		s = "both " + one(r.ProcessPeakRSS, r.ProcessPeakAnon)
	default:
		return "-"
	}
	if r.MasterPluginRSS != nil || r.SlavePluginRSS != nil {
		s += " +plugins " + mibs(r.MasterPluginRSS) + " / " + mibs(r.SlavePluginRSS)
	}
	return s
}

// cpu renders the CPU microseconds per message of the master, the slave
// and this process ("-" where not measured).
func cpu(r Result) string {
	if r.MasterCPUPerMsg == nil && r.SlaveCPUPerMsg == nil && r.ProcessCPUPerMsg == nil {
		return "-"
	}
	return num(r.MasterCPUPerMsg, 1) + " / " + num(r.SlaveCPUPerMsg, 1) + " / " + num(r.ProcessCPUPerMsg, 1)
}

// floors renders the put p50 as multiples of the in-process and the
// cross-process round trip, of the floor and of the three-process chain
// ("-" where not measured or not applying).
func floors(r Result) string {
	if r.P50PerRTT == nil && r.P50PerXProcRTT == nil && r.P50PerFloor == nil && r.P50PerChainRTT == nil {
		return "-"
	}
	return num(r.P50PerRTT, 1) + " / " + num(r.P50PerXProcRTT, 1) + " / " + num(r.P50PerFloor, 1) + " / " + num(r.P50PerChainRTT, 1)
}
