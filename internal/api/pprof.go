package api

import (
	"net/http/pprof"
)

// EnableProfiling mounts Go's profiling endpoints (net/http/pprof) under
// /debug/pprof/ with the metrics label route "pprof": the index, cmdline,
// profile (CPU, ?seconds=N, less than the server's write timeout), symbol,
// trace and the named profiles (heap, allocs, goroutine, mutex, block,
// threadcreate). They are behind the bearer token like every other route.
// Call it before the server starts serving.
func (s *Server) EnableProfiling() {
	s.HandleFunc("GET /debug/pprof/", "pprof", pprof.Index)
	s.HandleFunc("GET /debug/pprof/cmdline", "pprof", pprof.Cmdline)
	s.HandleFunc("GET /debug/pprof/profile", "pprof", pprof.Profile)
	s.HandleFunc("GET /debug/pprof/symbol", "pprof", pprof.Symbol)
	s.HandleFunc("POST /debug/pprof/symbol", "pprof", pprof.Symbol)
	s.HandleFunc("GET /debug/pprof/trace", "pprof", pprof.Trace)
}
