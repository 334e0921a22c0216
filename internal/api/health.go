package api

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DiskFullHold is how long after a put failed because the disk is full
// /readyz answers 503 "disk full". Puts are still tried meanwhile (they
// answer 507 at once while the disk stays full) and succeed by themselves
// once there is room; a successful put ends the hold at once.
const DiskFullHold = 5 * time.Second

// PutErrorLogInterval is how often at most a failing put is logged at
// ERROR per kind of failure (disk_full, other); the next line says how many
// were suppressed since.
const PutErrorLogInterval = 10 * time.Second

// IsDiskFull reports whether err says the disk (or the file system's
// quota) is full: ENOSPC or EDQUOT in its chain, or, from an external store
// plugin whose errors arrive as text, their message.
func IsDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}

// health is the API's view of conditions that make the node unfit for
// writes: a full disk (set by failing puts) and the rate limit of their
// log lines.
type health struct {
	now func() time.Time

	mu        sync.Mutex
	fullUntil time.Time // zero: not full
	logged    map[string]time.Time
	quiet     map[string]int // put failures not logged since the last line, by kind

	diskFull     prometheus.Gauge
	diskFullPuts prometheus.Counter
}

func newHealth(now func() time.Time) *health {
	h := &health{now: now, logged: map[string]time.Time{}, quiet: map[string]int{}}
	h.diskFull = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "replicator_http_disk_full",
		Help: "1 while puts fail because the disk is full (for DiskFullHold, 5 s, after the last such failure; /readyz answers 503 meanwhile), else 0.",
	})
	h.diskFullPuts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "replicator_http_disk_full_puts_total",
		Help: "Puts refused with 507 because the disk is full (ENOSPC).",
	})
	return h
}

// putFailed records a failed put; it returns whether to log it at ERROR and
// how many failures of its kind were not logged since the last line.
func (h *health) putFailed(err error) (log bool, suppressed int, kind string) {
	now := h.now()
	kind = "other"
	h.mu.Lock()
	defer h.mu.Unlock()
	if IsDiskFull(err) {
		kind = "disk_full"
		h.fullUntil = now.Add(DiskFullHold)
		h.diskFull.Set(1)
		h.diskFullPuts.Inc()
	}
	if last, ok := h.logged[kind]; ok && now.Sub(last) < PutErrorLogInterval {
		h.quiet[kind]++
		return false, 0, kind
	}
	suppressed = h.quiet[kind]
	h.logged[kind], h.quiet[kind] = now, 0
	return true, suppressed, kind
}

// putStored ends a disk-full hold.
func (h *health) putStored() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fullUntil.IsZero() {
		h.fullUntil = time.Time{}
		h.diskFull.Set(0)
	}
}

// diskFullNow reports whether the disk-full hold is on.
func (h *health) diskFullNow() bool {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fullUntil.IsZero() {
		return false
	}
	if !now.Before(h.fullUntil) {
		h.fullUntil = time.Time{}
		h.diskFull.Set(0)
		return false
	}
	return true
}

// logPutFailure logs a put that failed with a 5xx, rate-limited per kind.
func (s *Server) logPutFailure(topic string, err error) {
	log, n, kind := s.health.putFailed(err)
	if !log {
		return
	}
	msg := "put failed"
	if kind == "disk_full" {
		msg = "put failed: the disk is full; puts resume by themselves once there is room"
	}
	s.log.Error(msg, "topic", topic, "kind", kind, "error", err, "suppressed", n, "suppressed_window", PutErrorLogInterval)
}

// ReadyAnswer is the body of /readyz.
type ReadyAnswer struct {
	// Status: "ready", "starting", "shutting down", "disk full"; with
	// ?following on a slave "following" or "not following".
	Status string `json:"status"`
	// Role is the node's role (with ?following).
	Role string `json:"role,omitempty"`
	// Master is a slave's master HA address (with ?following).
	Master string `json:"master,omitempty"`
	// LastFrameMsAgo is the time since a slave's last frame from its
	// master, -1 before the first (with ?following).
	LastFrameMsAgo *int64 `json:"last_frame_ms_ago,omitempty"`
	Error          string `json:"error,omitempty"`
}

// readyChecks answers /readyz once the server is ready and not draining:
// a full disk first, then, with ?following, whether a slave
// follows a live master.
func (s *Server) readyChecks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "following" {
			WriteError(w, http.StatusBadRequest, "unknown query parameter "+k+" (want following)")
			return
		}
	}
	if s.health.diskFullNow() {
		WriteJSON(w, http.StatusServiceUnavailable, ReadyAnswer{Status: "disk full", Error: "puts fail: the disk is full (ENOSPC); free space, puts resume by themselves"})
		return
	}
	if !q.Has("following") {
		WriteJSON(w, http.StatusOK, ReadyAnswer{Status: "ready"})
		return
	}
	st := s.cfg.Backend.Status()
	if st.Master == nil {
		// A master follows nobody: it serves writes and fresh reads.
		WriteJSON(w, http.StatusOK, ReadyAnswer{Status: "ready", Role: st.Role})
		return
	}
	ago := st.Master.LastFrameMsAgo
	ans := ReadyAnswer{Role: st.Role, Master: st.Master.Addr, LastFrameMsAgo: &ago}
	why := ""
	switch {
	case !st.Master.Connected:
		why = "not connected to the master"
		if st.Master.LastError != "" {
			why += ": " + st.Master.LastError
		}
	case st.Master.Unhealthy != "":
		// Connected, but appending nothing (no consistent point, a log the
		// master cannot serve: heartbeats only).
		why = "connected but not replicating: " + st.Master.Unhealthy
	case st.Master.Diverged != "":
		// Classic: the master's API says its log is shorter than this one.
		why = "connected but not replicating: " + st.Master.Diverged
	case st.Master.SegmentError != "":
		why = "connected but not replicating: " + st.Master.SegmentError
	}
	if why != "" {
		ans.Status, ans.Error = "not following", why
		WriteJSON(w, http.StatusServiceUnavailable, ans)
		return
	}
	ans.Status = "following"
	WriteJSON(w, http.StatusOK, ans)
}

// diskFullAnswer is the 507 message of a put refused on a full disk.
const diskFullAnswer = "insufficient storage: the disk is full (ENOSPC); the message is not stored. Free space on the node's data directory: puts resume by themselves, no restart needed"
