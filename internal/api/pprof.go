package api

import (
	"net/http"
	"net/http/pprof"
)

// EnableProfiling mounts Go's profiling endpoints (net/http/pprof) under
// /debug/pprof/ with the metrics label route "pprof": the index, cmdline,
// profile (CPU, ?seconds=N, less than the server's write timeout), symbol,
// trace and the named profiles (heap, allocs, goroutine, mutex, block,
// threadcreate). They are behind the bearer token like every other route.
// Call it before the server starts serving.
func (s *Server) EnableProfiling() {
	s.Handle("/debug/pprof/", "pprof", methods{http.MethodGet: http.HandlerFunc(pprof.Index)})
	s.Handle("/debug/pprof/cmdline", "pprof", methods{http.MethodGet: http.HandlerFunc(pprof.Cmdline)})
	s.Handle("/debug/pprof/profile", "pprof", methods{http.MethodGet: http.HandlerFunc(pprof.Profile)})
	s.Handle("/debug/pprof/symbol", "pprof", methods{http.MethodGet: http.HandlerFunc(pprof.Symbol), http.MethodPost: http.HandlerFunc(pprof.Symbol)})
	s.Handle("/debug/pprof/trace", "pprof", methods{http.MethodGet: http.HandlerFunc(pprof.Trace)})
}
