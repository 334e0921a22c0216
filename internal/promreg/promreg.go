// Package promreg holds the one metrics-registration policy of the host:
// register a collector, or reuse the one already registered under the same
// description, so that components created again on one registry (a role
// change makes a new master or slave; several transports or stores share a
// node's registry) keep counting in the same series instead of failing.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on r and returns it, or returns the collector
// already registered with c's description when it has c's type. Any other
// registration error (a name registered with other labels or another kind)
// is returned with c. A nil r registers nothing and returns c.
func Register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	if r == nil {
		return c, nil
	}
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// Into registers *dst on r as Register does and stores the collector to use
// in *dst: the one already registered in its place, when there is one, so
// that the caller counts in the shared series.
func Into[C prometheus.Collector](r prometheus.Registerer, dst *C) error {
	c, err := Register(r, *dst)
	if err != nil {
		return err
	}
	*dst = c
	return nil
}
