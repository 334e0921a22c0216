package api

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// The API's metrics follow the host's one registration policy
// (internal/promreg): a Server registers each collector or takes the one
// already registered under its name, so two servers on one registry (a
// node's API port and a test's second server, or a restart in one process)
// count in the same series instead of failing. Counters and histograms then
// hold the sum of the servers; gauges moved by Inc/Dec (open streams, puts
// in flight) hold the sum too; a gauge that is Set
// (replicator_http_disk_full) shows the server that set it last.

// registerServerMetrics registers the request, authentication, path and
// health metrics on reg (nil: none), before any route captures them.
func (s *Server) registerServerMetrics(reg prometheus.Registerer) error {
	err := errors.Join(
		promreg.Into(reg, &s.reqs),
		promreg.Into(reg, &s.dur),
		promreg.Into(reg, &s.authFail),
		promreg.Into(reg, &s.rejected),
		promreg.Into(reg, &s.health.diskFull),
		promreg.Into(reg, &s.health.diskFullPuts),
	)
	if err != nil {
		return fmt.Errorf("api: registering metrics: %w", err)
	}
	return nil
}

// registerStreamMetrics registers the producer stream's metrics on reg
// (nil: none).
func (ss *streamService) registerMetrics(reg prometheus.Registerer) error {
	m := &ss.met
	err := errors.Join(
		promreg.Into(reg, &m.active),
		promreg.Into(reg, &m.messages),
		promreg.Into(reg, &m.batches),
		promreg.Into(reg, &m.batchLen),
		promreg.Into(reg, &m.inflight),
		promreg.Into(reg, &m.errors),
	)
	if err != nil {
		return fmt.Errorf("api: registering metrics: %w", err)
	}
	return nil
}
