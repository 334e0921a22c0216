package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/freeport"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// cluster is a master and a slave under load.
type cluster interface {
	// put stores one message for producer p.
	put(ctx context.Context, p int) (next int64, ok bool, err error)
	// waitSlave returns when the slave holds the bytes below next.
	waitSlave(ctx context.Context, next int64) (time.Time, error)
	mem() memGroups
	close() error
}

// opener opens commit-log stores, builtin or through the external plugin,
// the way the daemon does (the plugin registry).
type opener struct {
	factory pluginhost.StoreFactory
	host    *pluginhost.Host // external only
}

func (r *runner) newOpener(kind string) (*opener, error) {
	reg := pluginhost.Builtin()
	if kind == StoreBuiltin {
		f, err := reg.Store("commitlog")
		return &opener{factory: f}, err
	}
	h, err := pluginhost.NewHost(reg, pluginhost.HostOptions{AutoMTLS: true})
	if err != nil {
		return nil, err
	}
	loadErr := h.LoadDir(r.cfg.PluginsDir) // other plugins in the directory may fail
	ok := slices.ContainsFunc(h.Entries(), func(e pluginhost.Entry) bool {
		return e.Kind == plugin.KindStore && e.Name == "commitlog" && !e.Builtin
	})
	if !ok {
		h.Close()
		return nil, fmt.Errorf("the external commitlog store did not load from %s: %w", r.cfg.PluginsDir, loadErr)
	}
	f, err := reg.Store("commitlog")
	if err != nil {
		h.Close()
		return nil, err
	}
	return &opener{factory: f, host: h}, nil
}

// open opens the store of data directory dir and returns the pids of the
// plugin processes it started (none for a builtin store).
func (o *opener) open(dir string, seg int64) (store.Store, []int, error) {
	var before []*pluginhost.Process
	if o.host != nil {
		before = o.host.Processes()
	}
	st, err := o.factory(dir, pluginhost.StoreOptions{SegmentSize: seg})
	if err != nil {
		return nil, nil, err
	}
	var pids []int
	if o.host != nil {
		for _, p := range o.host.Processes() {
			if !slices.Contains(before, p) {
				pids = append(pids, p.Pid())
			}
		}
	}
	return st, pids, nil
}

func (o *opener) close() {
	if o.host != nil {
		o.host.Close()
	}
}

// libCluster is a master and a slave in this process (the library API)
// over loopback TCP.
type libCluster struct {
	op           *opener
	mst, sst     store.Store
	mPids, sPids []int
	m            *core.Master
	s            *core.SlaveNode
	msgs         []record.Message
}

func (r *runner) newLibCluster(ctx context.Context, kind, dir string, role core.Role, seg int64, producers int) (c *libCluster, err error) {
	c = &libCluster{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.op, err = r.newOpener(kind); err != nil {
		return c, err
	}
	if c.mst, c.mPids, err = c.op.open(filepath.Join(dir, "master"), seg); err != nil {
		return c, fmt.Errorf("opening the master's store: %w", err)
	}
	if c.sst, c.sPids, err = c.op.open(filepath.Join(dir, "slave"), seg); err != nil {
		return c, fmt.Errorf("opening the slave's store: %w", err)
	}
	tr := tcptransport.New(tcptransport.DefaultOptions())
	if c.m, err = core.NewMaster(c.mst, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: role, MaxLag: r.cfg.MaxLag}); err != nil {
		return c, err
	}
	if err = c.m.Start(); err != nil {
		return c, err
	}
	if c.s, err = core.NewSlave(c.sst, tr, core.SlaveConfig{MasterAddr: c.m.Addr(), ReconnectDelay: 100 * time.Millisecond}); err != nil {
		return c, err
	}
	if err = c.s.Start(); err != nil {
		return c, err
	}
	wctx, cancel := context.WithTimeout(ctx, childStartTimeout)
	defer cancel()
	if err = c.m.WaitSlaves(wctx, 1); err != nil {
		return c, fmt.Errorf("waiting for the slave: %w", err)
	}
	body := make([]byte, r.cfg.MsgSize)
	c.msgs = make([]record.Message, producers)
	for p := range c.msgs {
		c.msgs[p] = record.Message{Topic: "TopicBench", QueueID: int32(p % queues), Body: body}
	}
	return c, nil
}

func (c *libCluster) put(ctx context.Context, p int) (int64, bool, error) {
	res, err := c.m.Put(ctx, &c.msgs[p])
	return res.NextOffset, res.Status == core.PutOK, err
}

func (c *libCluster) waitSlave(ctx context.Context, next int64) (time.Time, error) {
	if c.sst.Bounds().Max >= next {
		return time.Now(), nil
	}
	ch := make(chan struct{}, 1)
	cancel := c.sst.Watch(ch)
	defer cancel()
	for c.sst.Bounds().Max < next {
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	return time.Now(), nil
}

func (c *libCluster) mem() memGroups {
	g := memGroups{self: pidsOf(0)}
	if len(c.mPids) > 0 {
		g.masterPlugin = pidsOf(c.mPids...)
	}
	if len(c.sPids) > 0 {
		g.slavePlugin = pidsOf(c.sPids...)
	}
	return g
}

func (c *libCluster) close() error {
	var errs []error
	if c.s != nil {
		errs = append(errs, ignoreClosed(c.s.Close()))
	}
	if c.m != nil {
		errs = append(errs, ignoreClosed(c.m.Close()))
	}
	if c.sst != nil {
		errs = append(errs, ignoreClosed(c.sst.Close()))
	}
	if c.mst != nil {
		errs = append(errs, ignoreClosed(c.mst.Close()))
	}
	if c.op != nil {
		c.op.close()
	}
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, core.ErrClosed) || errors.Is(err, store.ErrClosed) {
		return nil
	}
	return err
}

// apiCluster is a master and a slave as child processes of the replicator
// binary; producers use the master's HTTP API.
type apiCluster struct {
	master, slave *child
	mc, sc        *apiClient
	body          []byte
}

// nodeArgs are the global flags of a child node.
func (r *runner) nodeArgs(kind string) []string {
	args := []string{"--log-level", "warn", "--log-format", "text"}
	if kind == StoreExternal {
		args = append(args, "--plugins", r.cfg.PluginsDir)
	}
	return args
}

// protocolArgs are the node flags of the HA protocol being measured.
func (r *runner) protocolArgs() []string {
	if r.protocol == "" || r.protocol == ProtocolClassic {
		return nil
	}
	return []string{"--ha-protocol", r.protocol}
}

// profileArgs are the node flags that let profileDaemons fetch profiles.
func (r *runner) profileArgs() []string {
	if r.cfg.ProfileDir == "" {
		return nil
	}
	return []string{"--pprof"}
}

// startMaster starts a master child on data directory dir.
func (r *runner) startMaster(ctx context.Context, kind, dir, replication string, seg int64) (*child, string, error) {
	addrs, err := freeport.Addrs(2)
	if err != nil {
		return nil, "", err
	}
	api, ha := addrs[0], addrs[1]
	args := append(r.nodeArgs(kind), "master", "--data", dir, "--listen", api, "--ha-listen", ha,
		"--replication", replication, "--segment-size", strconv.FormatInt(seg, 10), "--max-lag", strconv.FormatInt(r.cfg.MaxLag, 10))
	args = append(append(args, r.profileArgs()...), r.protocolArgs()...)
	c, err := startChild(r.cfg.Exe, "master", dir+".log", "http://"+api, args...)
	if err != nil {
		return nil, "", err
	}
	if err := c.waitReady(ctx, readyClient); err != nil {
		c.stop()
		return nil, "", err
	}
	return c, ha, nil
}

// startSlave starts a slave child on data directory dir following master.
func (r *runner) startSlave(ctx context.Context, kind, dir string, master *child, ha string, seg int64) (*child, error) {
	addrs, err := freeport.Addrs(1)
	if err != nil {
		return nil, err
	}
	args := append(r.nodeArgs(kind), "slave", "--data", dir, "--listen", addrs[0], "--master", ha,
		"--master-api", master.api, "--segment-size", strconv.FormatInt(seg, 10), "--reconnect-delay", "100ms")
	args = append(append(args, r.profileArgs()...), r.protocolArgs()...)
	return startChild(r.cfg.Exe, "slave", dir+".log", "http://"+addrs[0], args...)
}

// readyClient polls readiness.
var readyClient = &http.Client{Timeout: time.Second}

func (r *runner) newAPICluster(ctx context.Context, kind, dir, replication string, seg int64, producers int) (c *apiCluster, err error) {
	c = &apiCluster{body: make([]byte, r.cfg.MsgSize)}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	var ha string
	if c.master, ha, err = r.startMaster(ctx, kind, filepath.Join(dir, "master"), replication, seg); err != nil {
		return c, err
	}
	if c.slave, err = r.startSlave(ctx, kind, filepath.Join(dir, "slave"), c.master, ha, seg); err != nil {
		return c, err
	}
	if err = c.slave.waitReady(ctx, readyClient); err != nil {
		return c, err
	}
	c.mc, c.sc = newAPIClient(c.master.api, producers), newAPIClient(c.slave.api, 2)
	deadline := time.Now().Add(childStartTimeout)
	for {
		st, err := c.mc.status(ctx)
		if err == nil && len(st.Slaves) > 0 {
			return c, nil
		}
		select {
		case <-c.master.Done():
			return c, c.master.Exited()
		case <-c.slave.Done():
			return c, c.slave.Exited()
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(childPoll):
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("the slave did not connect within %s (logs %s, %s)", childStartTimeout, c.master.Log(), c.slave.Log())
		}
	}
}

func (c *apiCluster) put(ctx context.Context, p int) (int64, bool, error) {
	n, ok, err := c.mc.put(ctx, p, c.body)
	if err != nil {
		select {
		case <-c.master.Done():
			return n, ok, c.master.Exited()
		default:
		}
	}
	return n, ok, err
}

// waitSlave polls the slave's status until its max offset reaches next.
func (c *apiCluster) waitSlave(ctx context.Context, next int64) (time.Time, error) {
	for {
		st, err := c.sc.status(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if st.MaxOffset >= next {
			return time.Now(), nil
		}
	}
}

func (c *apiCluster) mem() memGroups {
	return memGroups{
		master:       pidsOf(c.master.Pid()),
		slave:        pidsOf(c.slave.Pid()),
		masterPlugin: childrenPids(c.master.Pid()),
		slavePlugin:  childrenPids(c.slave.Pid()),
	}
}

func (c *apiCluster) close() error {
	var errs []error
	if c.mc != nil {
		c.mc.close()
		c.sc.close()
	}
	if c.slave != nil {
		errs = append(errs, c.slave.stop())
	}
	if c.master != nil {
		errs = append(errs, c.master.stop())
	}
	return errors.Join(errs...)
}
