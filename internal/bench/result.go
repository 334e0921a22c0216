package bench

import (
	"runtime"
	"slices"
	"time"
)

// Result is one scenario point: the medians of its runs. It marshals to
// one JSON object; pointer fields are null where they do not apply.
type Result struct {
	Scenario    string   `json:"scenario"` // catchup, sync, async
	Store       string   `json:"store"`    // builtin, external
	Via         string   `json:"via"`      // api, library
	Protocol    string   `json:"protocol"` // the HA protocol: classic, autoswitch
	Producers   *int     `json:"producers"`
	MsgSize     *int     `json:"msg_size"`
	DurationS   *float64 `json:"duration_s"`    // sync/async: asked measuring time
	MaxLag      *int64   `json:"max_lag_bytes"` // async: the master's back-pressure (0: none)
	SizeBytes   *int64   `json:"size_bytes"`    // catchup: the master's log
	SegmentSize int64    `json:"segment_size"`
	Runs        int      `json:"runs"`

	Messages int64   `json:"messages"` // of the median run (by MB/s)
	Bytes    int64   `json:"bytes"`    // of the median run
	ElapsedS float64 `json:"elapsed_s"`

	MBPerS   *float64 `json:"mb_per_s"` // 10^6 bytes/s: catch-up bytes, or message bodies
	MsgsPerS *float64 `json:"msgs_per_s"`
	P50Ms    *float64 `json:"p50_ms"` // put latency
	P99Ms    *float64 `json:"p99_ms"`
	P999Ms   *float64 `json:"p999_ms"`
	NotPutOK *int64   `json:"not_put_ok"` // puts stored with another status

	LagP50Ms   *float64 `json:"lag_p50_ms"` // async: put returned -> on the slave
	LagP99Ms   *float64 `json:"lag_p99_ms"`
	LagMaxMs   *float64 `json:"lag_max_ms"`
	LagSamples *int     `json:"lag_samples"`

	Limit string `json:"limit"` // what limit_mb_per_s is: "loopback_tcp"
	// LoopbackMBPerS is loopback TCP measured at the start of the bench;
	// limit_mb_per_s is the same, except for catchup, which measures it
	// again before each run.
	LoopbackMBPerS *float64 `json:"loopback_mb_per_s"`
	LimitMBPerS    *float64 `json:"limit_mb_per_s"`
	RatioToLimit   *float64 `json:"ratio_to_limit"`
	DiskMBPerS     *float64 `json:"disk_write_mb_per_s"`
	RatioToDisk    *float64 `json:"ratio_to_disk"`
	// PageWriteMBPerS is filling a fresh file's page-cache pages (32 KiB
	// pwrites, no sync): what a replica must do at least with each byte.
	PageWriteMBPerS  *float64 `json:"page_write_mb_per_s"`
	RatioToPageWrite *float64 `json:"ratio_to_page_write"`
	FdatasyncPS      *float64 `json:"disk_fdatasync_per_s"`
	RTTP50Ms         *float64 `json:"tcp_rtt_p50_ms"`
	RTTP99Ms         *float64 `json:"tcp_rtt_p99_ms"`
	// The same 8-byte round trip with the echoing end in a child process
	// (null unless measured; `replicator bench` always measures it).
	RTTXProcP50Ms *float64 `json:"tcp_rtt_xproc_p50_ms"`
	RTTXProcP99Ms *float64 `json:"tcp_rtt_xproc_p99_ms"`
	// 8 bytes along three processes (this one -> relay -> echo -> relay
	// -> this one; null unless measured): a sync put through the daemons
	// with no processing.
	RTTChainP50Ms *float64 `json:"tcp_rtt_chain_p50_ms"`
	RTTChainP99Ms *float64 `json:"tcp_rtt_chain_p99_ms"`
	// FloorLinks is how many process-to-process links a put of this point
	// crosses in series, each a request and an answer (sync and async via
	// api and client: producer -> master, and for sync also master ->
	// slave); FloorP50Ms is that many cross-process round trips: the p50 a
	// put through the daemons could reach with no processing at all. Null
	// for library, catch-up and peer points.
	FloorLinks *int     `json:"floor_links"`
	FloorP50Ms *float64 `json:"floor_p50_ms"`
	// The put p50 divided by tcp_rtt_p50_ms (the aim for a sync
	// put via client: under 3), by tcp_rtt_xproc_p50_ms, by floor_p50_ms
	// and, for sync points via api and client, by tcp_rtt_chain_p50_ms.
	P50PerRTT      *float64 `json:"p50_per_rtt"`
	P50PerXProcRTT *float64 `json:"p50_per_rtt_xproc"`
	P50PerFloor    *float64 `json:"p50_per_floor"`
	P50PerChainRTT *float64 `json:"p50_per_rtt_chain"`

	MBPerSRuns   []float64 `json:"mb_per_s_runs"`
	MsgsPerSRuns []float64 `json:"msgs_per_s_runs"`
	RatioRuns    []float64 `json:"ratio_to_limit_runs"`
	LimitRuns    []float64 `json:"limit_mb_per_s_runs"`

	// Memory (bytes): VmHWM, and the largest sampled RssAnon and RssFile.
	MasterPeakRSS   *int64 `json:"master_peak_rss_bytes"`
	MasterPeakAnon  *int64 `json:"master_peak_rss_anon_bytes"`
	MasterPeakFile  *int64 `json:"master_peak_rss_file_bytes"`
	SlavePeakRSS    *int64 `json:"slave_peak_rss_bytes"`
	SlavePeakAnon   *int64 `json:"slave_peak_rss_anon_bytes"`
	SlavePeakFile   *int64 `json:"slave_peak_rss_file_bytes"`
	MasterPluginRSS *int64 `json:"master_plugin_peak_rss_bytes"` // external store process
	SlavePluginRSS  *int64 `json:"slave_plugin_peak_rss_bytes"`
	ProcessPeakRSS  *int64 `json:"process_peak_rss_bytes"` // library: master and slave share this process
	ProcessPeakAnon *int64 `json:"process_peak_rss_anon_bytes"`
	// RSS at the first sample of the measured phase, to show growth.
	MasterStartAnon *int64 `json:"master_start_rss_anon_bytes"`
	SlaveStartAnon  *int64 `json:"slave_start_rss_anon_bytes"`

	// CPU microseconds per message during the measured phase (median of
	// the runs): the master and slave daemons with their plugin processes
	// (api and client points), and this process (the producers; in library
	// points also the master and the slave).
	MasterCPUPerMsg  *float64 `json:"master_cpu_us_per_msg"`
	SlaveCPUPerMsg   *float64 `json:"slave_cpu_us_per_msg"`
	ProcessCPUPerMsg *float64 `json:"process_cpu_us_per_msg"`
	// Catch-up via the API: CPU nanoseconds per KB (1000 bytes) received,
	// of the master and of the slave daemon, from the slave's first status
	// answer until it holds the whole log (median of the runs).
	MasterCPUPerKB *float64 `json:"master_cpu_ns_per_kb"`
	SlaveCPUPerKB  *float64 `json:"slave_cpu_ns_per_kb"`

	BusyPct float64 `json:"machine_busy_pct"` // CPU busy share before the point
	CPUs    int     `json:"cpus"`
	Time    string  `json:"time"` // RFC 3339, when the point finished
}

// run is what one repetition of a point measured.
type run struct {
	mbps, msgsps      float64
	p50, p99, p999    time.Duration
	lagP50, lagP99    time.Duration
	lagMax            time.Duration
	lagSamples        int
	notOK             int64
	messages, bytes   int64
	elapsed           time.Duration
	limit             float64 // catchup: raw loopback measured before the run
	mem               memory
	cpu               cpuPerMsg
	busy              float64
	hasLat, hasLag    bool
	hasMsgs, hasLimit bool
	hasCatchCPU       bool // cpu is per KB of a catch-up, not per message
}

// memory is what the RSS sampler saw.
type memory struct {
	master, slave             procMem
	masterPlugin, slavePlugin procMem
	self                      procMem
}

// procMem is one process's (or process group's) peak memory.
type procMem struct {
	valid     bool
	hwm       int64
	anon      int64
	file      int64
	startAnon int64
}

func ptr[T any](v T) *T { return &v }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(runs []run, f func(run) time.Duration) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = ms(f(r))
	}
	return median(xs)
}

// summarize turns the runs of a point into its Result.
func (r *runner) summarize(base Result, runs []run) Result {
	res := base
	res.Runs = len(runs)
	res.CPUs = runtime.NumCPU()
	res.Time = time.Now().UTC().Format(time.RFC3339)
	res.Limit = "loopback_tcp"
	l := r.limits
	mb := make([]float64, len(runs))
	msgs := make([]float64, len(runs))
	ratio := make([]float64, len(runs))
	limits := make([]float64, len(runs))
	busy := make([]float64, len(runs))
	for i, x := range runs {
		mb[i], msgs[i], busy[i] = x.mbps, x.msgsps, x.busy
		limits[i] = l.TCPMBps
		if x.hasLimit {
			limits[i] = x.limit
		}
		if limits[i] > 0 {
			ratio[i] = x.mbps / limits[i]
		}
	}
	res.MBPerSRuns, res.RatioRuns, res.LimitRuns = mb, ratio, limits
	res.MBPerS = ptr(median(mb))
	res.LimitMBPerS = ptr(median(limits))
	res.RatioToLimit = ptr(median(ratio))
	res.BusyPct = median(busy)
	if l.DiskWriteMBps > 0 {
		res.DiskMBPerS = ptr(l.DiskWriteMBps)
		res.RatioToDisk = ptr(*res.MBPerS / l.DiskWriteMBps)
	}
	if l.PageWriteMBps > 0 {
		res.PageWriteMBPerS = ptr(l.PageWriteMBps)
		res.RatioToPageWrite = ptr(*res.MBPerS / l.PageWriteMBps)
	}
	res.FdatasyncPS = ptr(l.FdatasyncPerSec)
	res.LoopbackMBPerS = ptr(l.TCPMBps)
	res.RTTP50Ms, res.RTTP99Ms = ptr(ms(l.RTTP50)), ptr(ms(l.RTTP99))
	if l.XProcRTTP50 > 0 {
		res.RTTXProcP50Ms, res.RTTXProcP99Ms = ptr(ms(l.XProcRTTP50)), ptr(ms(l.XProcRTTP99))
	}
	if l.ChainRTTP50 > 0 {
		res.RTTChainP50Ms, res.RTTChainP99Ms = ptr(ms(l.ChainRTTP50)), ptr(ms(l.ChainRTTP99))
	}
	// The run whose MB/s is the median (the lower middle one) gives the
	// counts and the memory.
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case runs[a].mbps < runs[b].mbps:
			return -1
		case runs[a].mbps > runs[b].mbps:
			return 1
		}
		return 0
	})
	mid := runs[order[(len(order)-1)/2]]
	res.Messages, res.Bytes, res.ElapsedS = mid.messages, mid.bytes, mid.elapsed.Seconds()
	if mid.hasMsgs {
		res.MsgsPerSRuns = msgs
		res.MsgsPerS = ptr(median(msgs))
	}
	if mid.hasLat {
		res.P50Ms = ptr(medianDur(runs, func(x run) time.Duration { return x.p50 }))
		res.P99Ms = ptr(medianDur(runs, func(x run) time.Duration { return x.p99 }))
		res.P999Ms = ptr(medianDur(runs, func(x run) time.Duration { return x.p999 }))
		var bad int64
		for _, x := range runs {
			bad += x.notOK
		}
		res.NotPutOK = ptr(bad)
		r.floor(&res)
		res.MasterCPUPerMsg = medianCPU(runs, func(c cpuPerMsg) float64 { return c.master })
		res.SlaveCPUPerMsg = medianCPU(runs, func(c cpuPerMsg) float64 { return c.slave })
		res.ProcessCPUPerMsg = medianCPU(runs, func(c cpuPerMsg) float64 { return c.self })
	}
	if mid.hasCatchCPU {
		res.MasterCPUPerKB = medianCPU(runs, func(c cpuPerMsg) float64 { return c.master * 1000 })
		res.SlaveCPUPerKB = medianCPU(runs, func(c cpuPerMsg) float64 { return c.slave * 1000 })
	}
	if mid.hasLag {
		res.LagP50Ms = ptr(medianDur(runs, func(x run) time.Duration { return x.lagP50 }))
		res.LagP99Ms = ptr(medianDur(runs, func(x run) time.Duration { return x.lagP99 }))
		res.LagMaxMs = ptr(medianDur(runs, func(x run) time.Duration { return x.lagMax }))
		n := 0
		for _, x := range runs {
			n += x.lagSamples
		}
		res.LagSamples = ptr(n)
	}
	// Memory: the largest over the runs.
	var m memory
	for _, x := range runs {
		m.master.merge(x.mem.master)
		m.slave.merge(x.mem.slave)
		m.masterPlugin.merge(x.mem.masterPlugin)
		m.slavePlugin.merge(x.mem.slavePlugin)
		m.self.merge(x.mem.self)
	}
	if m.master.valid {
		res.MasterPeakRSS, res.MasterPeakAnon, res.MasterPeakFile = ptr(m.master.hwm), ptr(m.master.anon), ptr(m.master.file)
		res.MasterStartAnon = ptr(m.master.startAnon)
	}
	if m.slave.valid {
		res.SlavePeakRSS, res.SlavePeakAnon, res.SlavePeakFile = ptr(m.slave.hwm), ptr(m.slave.anon), ptr(m.slave.file)
		res.SlaveStartAnon = ptr(m.slave.startAnon)
	}
	if m.masterPlugin.valid {
		res.MasterPluginRSS = ptr(m.masterPlugin.hwm)
	}
	if m.slavePlugin.valid {
		res.SlavePluginRSS = ptr(m.slavePlugin.hwm)
	}
	if m.self.valid {
		res.ProcessPeakRSS, res.ProcessPeakAnon = ptr(m.self.hwm), ptr(m.self.anon)
	}
	return res
}

// floor sets res's floor and its p50's ratios to the round trips.
func (r *runner) floor(res *Result) {
	l := r.limits
	p50 := *res.P50Ms
	if l.RTTP50 > 0 {
		res.P50PerRTT = ptr(p50 / ms(l.RTTP50))
	}
	if l.XProcRTTP50 <= 0 {
		return
	}
	res.P50PerXProcRTT = ptr(p50 / ms(l.XProcRTTP50))
	if res.Via != ViaAPI && res.Via != ViaClient {
		return
	}
	links := 1
	if res.Scenario == Sync {
		links = 2
	}
	res.FloorLinks = ptr(links)
	res.FloorP50Ms = ptr(float64(links) * ms(l.XProcRTTP50))
	res.P50PerFloor = ptr(p50 / *res.FloorP50Ms)
	if res.Scenario == Sync && l.ChainRTTP50 > 0 {
		res.P50PerChainRTT = ptr(p50 / ms(l.ChainRTTP50))
	}
}

// merge keeps the larger peaks of p and o.
func (p *procMem) merge(o procMem) {
	if !o.valid {
		return
	}
	if !p.valid {
		*p = o
		return
	}
	p.hwm, p.anon, p.file = max(p.hwm, o.hwm), max(p.anon, o.anon), max(p.file, o.file)
	p.startAnon = max(p.startAnon, o.startAnon)
}
