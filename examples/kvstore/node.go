package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

// nodeConfig is what leader and follower are started with.
type nodeConfig struct {
	Data           string
	HTTP           string
	HA             string // leader: HA listen address
	Leader         string // follower: the leader's HA address
	Replication    string // leader: sync or async
	SyncTimeout    time.Duration
	SegmentSize    int64
	ReconnectDelay time.Duration
}

// node is a running leader or follower.
type node struct {
	cfg    nodeConfig
	log    hclog.Logger
	st     *commitlog.Log
	eng    *Engine
	master *core.Master    // leader
	slave  *core.SlaveNode // follower
}

func openStore(cfg nodeConfig, log hclog.Logger) (*commitlog.Log, error) {
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = cfg.SegmentSize
	opts.Logger = log
	// No retention: the log is the database. Deleting old segments would
	// lose keys written long ago.
	st, err := commitlog.Open(cfg.Data, opts)
	if err != nil {
		return nil, fmt.Errorf("open the log in %s: %w", cfg.Data, err)
	}
	return st, nil
}

// runNode runs a leader (leader true) or a follower until ctx ends, then
// shuts down in order: HTTP, replication, log.
func runNode(ctx context.Context, cfg nodeConfig, leader bool, log hclog.Logger) (err error) {
	n := &node{cfg: cfg, log: log}
	if n.st, err = openStore(cfg, log); err != nil {
		return err
	}
	defer func() {
		if cerr := n.st.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close the log: %w", cerr)
		}
	}()

	// Rebuild the state from the log before serving anything.
	n.eng = NewEngine(n.st, log.Named("engine"))
	start := time.Now()
	if err := n.eng.CatchUp(); err != nil {
		return err
	}
	stats, _ := n.eng.Stats()
	log.Info("state rebuilt from the log", "keys", stats.Keys, "records", stats.Records, "applied_offset", stats.AppliedOffset, "took", time.Since(start).Round(time.Millisecond))

	topts := tcptransport.DefaultOptions()
	topts.Logger = log
	tr := tcptransport.New(topts)
	if leader {
		role := core.AsyncMaster
		if cfg.Replication == "sync" {
			role = core.SyncMaster
		}
		n.master, err = core.NewMaster(n.st, tr, core.MasterConfig{
			ListenAddr:   cfg.HA,
			Role:         role,
			SlaveTimeout: cfg.SyncTimeout,
			// A new follower needs the whole log to build its state, not
			// only the last segment (RocketMQ 4.x's rule for an empty slave).
			StartFromFirstSegment: true,
			Logger:                log,
		})
		if err == nil {
			err = n.master.Start()
		}
		if err != nil {
			return fmt.Errorf("start the leader's HA listener: %w", err)
		}
		defer n.master.Close()
		log.Info("leader started", "ha", n.master.Addr(), "replication", role)
	} else {
		n.slave, err = core.NewSlave(n.st, tr, core.SlaveConfig{
			MasterAddr:     cfg.Leader,
			ReconnectDelay: cfg.ReconnectDelay,
			Logger:         log,
		})
		if err == nil {
			err = n.slave.Start()
		}
		if err != nil {
			return fmt.Errorf("start the follower's HA client: %w", err)
		}
		defer n.slave.Close()
		log.Info("follower started", "leader", cfg.Leader)
	}

	actx, stopApply := context.WithCancel(context.Background())
	applyDone := make(chan struct{})
	go func() { defer close(applyDone); n.eng.Run(actx) }()
	defer func() { stopApply(); <-applyDone }()

	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTP, err)
	}
	srv := &http.Server{Handler: n.routes(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "http", ln.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.SyncTimeout+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	<-served
	return nil
}

func (n *node) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/keys/{key}", n.get)
	mux.HandleFunc("PUT /v1/keys/{key}", func(w http.ResponseWriter, r *http.Request) { n.write(w, r, OpPut) })
	mux.HandleFunc("DELETE /v1/keys/{key}", func(w http.ResponseWriter, r *http.Request) { n.write(w, r, OpDelete) })
	mux.HandleFunc("GET /v1/status", n.status)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

// writeResult is the answer to a PUT or DELETE.
type writeResult struct {
	Status     string `json:"status"` // PUT_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_DISK_TIMEOUT
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
}

func (n *node) write(w http.ResponseWriter, r *http.Request, op string) {
	if n.master == nil {
		writeError(w, http.StatusForbidden, errors.New("this node is a follower: write to the leader"))
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueSize))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, ErrValueTooLarge)
		return
	}
	msg, err := Encode(op, r.PathValue("key"), value)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	if n.cfg.Replication == "sync" {
		// A sync write needs a follower: wait for one to be connected
		// (at most the sync timeout) instead of storing the write on the
		// leader alone and answering SLAVE_NOT_AVAILABLE.
		wctx, cancel := context.WithTimeout(ctx, n.cfg.SyncTimeout)
		err := n.master.WaitSlaves(wctx, 1)
		cancel()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("no follower connected within %v: %w", n.cfg.SyncTimeout, err))
			return
		}
	}
	res, err := n.master.Put(ctx, msg)
	if err != nil && res.NextOffset == 0 {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	// The write is in the leader's log; apply it before answering, so a
	// read on the leader right after sees it.
	if err := n.eng.CatchUp(); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, writeResult{Status: res.Status.String(), Offset: res.Offset, NextOffset: res.NextOffset})
}

func (n *node) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if !keyRE.MatchString(key) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%w: %q", ErrInvalidKey, key))
		return
	}
	v, ok, err := n.eng.Get(key)
	switch {
	case err != nil:
		writeError(w, http.StatusInternalServerError, err)
	case !ok:
		writeError(w, http.StatusNotFound, fmt.Errorf("key %q not found", key))
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		w.Write(v)
	}
}

// statusResult is the answer to GET /v1/status.
type statusResult struct {
	Role      string `json:"role"` // leader or follower
	MaxOffset int64  `json:"max_offset"`
	Stats
	Followers int    `json:"followers,omitempty"`  // leader: connected followers
	Leader    string `json:"leader,omitempty"`     // follower: the leader's HA address
	Connected bool   `json:"connected,omitempty"`  // follower: HA connection up
	LastError string `json:"last_error,omitempty"` // follower: last HA error
}

func (n *node) status(w http.ResponseWriter, _ *http.Request) {
	st, err := n.eng.Stats()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	res := statusResult{MaxOffset: n.st.Bounds().Max, Stats: st}
	if n.master != nil {
		res.Role = "leader"
		res.Followers = len(n.master.Status().Slaves)
	} else {
		ss := n.slave.Status()
		res.Role, res.Leader, res.Connected, res.LastError = "follower", ss.MasterAddr, ss.Connected, ss.LastError
	}
	writeJSON(w, http.StatusOK, res)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
