package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
)

// autoSwitchOpts are the options of the autoswitch HA protocol (RocketMQ 5
// controller mode) and of the role history, on master and slave.
type autoSwitchOpts struct {
	Protocol            string        // classic | autoswitch
	BrokerID            int64         // 0: the id stored in the data directory
	MaxTimeNotCatchup   time.Duration // master: SyncStateSet shrink
	ReadConfirmed       bool          // slave: reads only up to the confirm offset
	SyncFromLastFile    bool          // slave: a fresh replica starts at the master's last segment
	AsyncLearner        bool          // slave: never joins the SyncStateSet
	AllowDivergedRejoin bool          // classic slave on a directory that last ran as a master
}

// maxBrokerID bounds --broker-id: small ids read well in status and logs.
const maxBrokerID = 1<<31 - 1

// autoSwitchCommon are the options both roles take: a node of either role
// may change role at runtime in autoswitch mode.
func autoSwitchCommon(n *nodeOpts) []*config.Option {
	a := &n.as
	return []*config.Option{
		{Name: "ha-protocol", Meta: "PROTOCOL", Help: "HA wire protocol: classic (RocketMQ 4) or autoswitch (RocketMQ 5 controller mode: epochs, handshake, truncation, runtime role changes)", Default: "classic", Value: config.Enum(&a.Protocol, "classic", "autoswitch")},
		{Name: "broker-id", Meta: "N", Help: "autoswitch: this node's broker id, 1 or more (default: the id stored in DIR/role, chosen at random below 1000000 at the first start)", Value: config.Int64(&a.BrokerID, 1, maxBrokerID)},
		{Name: "ha-max-time-slave-not-catchup", Meta: "DURATION", Help: "autoswitch master: a slave that has not caught up for this long leaves the in-sync set", Default: "15s", Value: config.Duration(&a.MaxTimeNotCatchup, 100*time.Millisecond, time.Hour)},
		{Name: "read-confirmed", Help: "autoswitch slave: serve reads only up to the confirm offset (bytes every in-sync replica holds)", Value: config.Bool(&a.ReadConfirmed)},
		{Name: "sync-from-last-file", Help: "autoswitch slave: an empty replica starts at the master's last segment instead of its first byte", Value: config.Bool(&a.SyncFromLastFile)},
		{Name: "async-learner", Help: "autoswitch slave: replicate but never join the in-sync set (sync puts do not wait for it)", Value: config.Bool(&a.AsyncLearner)},
	}
}

// autoSwitchMasterOpts adds what a master needs to become a slave at
// runtime (demote).
func autoSwitchMasterOpts(n *nodeOpts) []*config.Option {
	return append(autoSwitchCommon(n),
		&config.Option{Name: "reconnect-delay", Meta: "DURATION", Help: "autoswitch, after a demote: wait before reconnecting to the new master after a failure", Default: "5s", Value: config.Duration(&n.ReconnectDelay, time.Millisecond, time.Hour)},
		&config.Option{Name: "metadata-interval", Meta: "DURATION", Help: "autoswitch, after a demote with --master-api: how often to pull the new master's metadata", Default: "10s", Value: config.Duration(&n.MetadataInterval, 10*time.Millisecond, 24*time.Hour)},
	)
}

// autoSwitchSlaveOpts adds what a slave needs to become a master at
// runtime (promote) and the classic-mode override of the role history.
func autoSwitchSlaveOpts(n *nodeOpts) []*config.Option {
	return append(autoSwitchCommon(n),
		&config.Option{Name: "allow-diverged-rejoin", Help: "classic: start even though the data directory last ran as a master (its log may hold messages the new master never had; they stay and differ from the master's)", Value: config.Bool(&n.as.AllowDivergedRejoin)},
		&config.Option{Name: "ha-listen", Meta: "ADDR", Help: "autoswitch: HA address to listen on after a promote (default: the --listen host, its port + 1)", Value: config.Addr(&n.HAListen, true)},
		&config.Option{Name: "replication", Meta: "MODE", Help: "autoswitch: replication after a promote, async or sync", Default: "async", Value: config.Enum(&n.Replication, "async", "sync")},
		&config.Option{Name: "slave-timeout", Meta: "DURATION", Help: "autoswitch, sync replication after a promote: how long a put waits for slaves", Default: "5s", Value: config.Duration(&n.SlaveTimeout, time.Millisecond, 10*time.Minute)},
		&config.Option{Name: "sync-acks", Meta: "N", Help: "autoswitch, sync replication after a promote: slaves that must hold a message (default: every in-sync slave)", Value: config.Int(&n.SyncAcks, 1, 64)},
	)
}

// roleOpts are the options of promote and demote.
type roleOpts struct {
	sec    clientSecurity
	API    string
	Master string // demote: the new master's HA address
	// MasterAPI is demote's new master API base URL (metadata sync, 403
	// answers); "" leaves metadata unsynchronised.
	MasterAPI string
	Epoch     int // promote: the epoch to take (0: last + 1)
	JSON      bool
	Timeout   time.Duration
}

func promoteCommand(r *roleOpts) *config.Command {
	return &config.Command{
		Name:     "promote",
		Synopsis: "turn a running autoswitch slave into a master (new epoch)",
		Help: `Ask the node at --api (an autoswitch slave) to become a master: it stops
following its master, appends a new epoch (its last epoch + 1, or --epoch)
starting at its max offset, opens its HA listener and takes puts. Demote the
old master first (replicator demote) so that two masters never take writes
at once. Prints the node's new status.

Exit status: 0 when the node is a master, 1 when it refused (classic mode,
already a master, an older epoch) or could not be reached, 2 on bad usage.`,
		Options: append([]*config.Option{
			{Name: "api", Meta: "URL", Help: "the slave's HTTP API", Default: defaultAPIURL, Value: config.URL(&r.API, false)},
			{Name: "epoch", Meta: "N", Help: "the epoch to take (0: the node's last epoch + 1)", Default: "0", Value: config.Int(&r.Epoch, 0, 1<<31-1)},
			{Name: "json", Help: "print the raw JSON status", Value: config.Bool(&r.JSON)},
			{Name: "timeout", Meta: "DURATION", Help: "request timeout", Default: "30s", Value: config.Duration(&r.Timeout, time.Millisecond, time.Hour)},
		}, clientSecurityOpts(&r.sec)...),
	}
}

func demoteCommand(r *roleOpts) *config.Command {
	return &config.Command{
		Name:     "demote",
		Synopsis: "turn a running autoswitch master into a slave of another master",
		Help: `Ask the node at --api (an autoswitch master) to become a slave of the master
at --master (an HA address): it refuses new puts at once, fails the sync
puts still waiting for slaves (503: stored here, but cut if the new master
does not have them), then connects to --master, handshakes, truncates its
log to the last point consistent with the new master and follows it.
Its metadata API refuses writes (403) from then on; with --master-api
it synchronises metadata from the new master (with --metadata-source
remoting, from the new master's HA host, HA port - 3), without it
metadata is not synchronised (one WARN line in the node's log).
Prints the node's new status.

Exit status: 0 when the node is a slave, 1 when it refused (classic mode,
already a slave) or could not be reached, 2 on bad usage.`,
		Options: append([]*config.Option{
			{Name: "api", Meta: "URL", Help: "the master's HTTP API", Default: defaultAPIURL, Value: config.URL(&r.API, false)},
			{Name: "master", Meta: "HA_ADDR", Help: "the new master's HA address", Value: config.Addr(&r.Master, false), Required: true},
			{Name: "master-api", Meta: "URL", Help: "the new master's HTTP API, for metadata sync and the node's 403 answers (default: none; metadata is then not synchronised)", Value: config.URL(&r.MasterAPI, true)},
			{Name: "json", Help: "print the raw JSON status", Value: config.Bool(&r.JSON)},
			{Name: "timeout", Meta: "DURATION", Help: "request timeout", Default: "30s", Value: config.Duration(&r.Timeout, time.Millisecond, time.Hour)},
		}, clientSecurityOpts(&r.sec)...),
	}
}

// runRole sends POST /v1/role for promote (req.Role "master") or demote
// ("slave") and prints the answer.
func runRole(ctx context.Context, e *env, name string) int {
	o := &e.opts.role
	c, err := e.newSecureClient(o.sec, o.API, o.Timeout)
	if err != nil {
		return e.failErr(name, usage(err))
	}
	req := api.RoleRequest{Role: api.RoleMaster, Epoch: int32(o.Epoch)}
	if name == "demote" {
		req = api.RoleRequest{Role: api.RoleSlave, Master: o.Master, MasterAPI: o.MasterAPI}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return e.fail("%s: %v", name, err)
	}
	start := time.Now()
	var raw json.RawMessage
	h := http.Header{"Content-Type": {"application/json"}}
	if err := c.do(ctx, http.MethodPost, "/v1/role", nil, h, body, &raw); err != nil {
		return e.fail("%s: %v", name, err)
	}
	took := time.Since(start)
	if o.JSON {
		return printRawJSON(e, raw)
	}
	var st api.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return e.fail("%s: bad answer: %v", name, err)
	}
	fmt.Fprintf(e.stdout, "%s: %s is now %s (epoch %d) after %s\n", name, o.API, st.Role, st.Epoch, took.Round(time.Millisecond))
	printStatus(e.stdout, o.API, st)
	return exitOK
}

// printRawJSON prints a JSON answer indented.
func printRawJSON(e *env, raw json.RawMessage) int {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return e.fail("bad answer: %v", err)
	}
	buf.WriteByte('\n')
	e.stdout.Write(buf.Bytes())
	return exitOK
}

// autoSwitchConfig sets the protocol, role-history and autoswitch fields
// of cfg from the options of role.
func (e *env) autoSwitchConfig(role string, o *nodeOpts, cfg *node.Config) error {
	a := &o.as
	p, err := core.ParseProtocol(a.Protocol)
	if err != nil {
		return fmt.Errorf("--ha-protocol: %w", err)
	}
	cfg.Protocol = p
	cfg.BrokerID = a.BrokerID
	cfg.MaxTimeSlaveNotCatchup = a.MaxTimeNotCatchup
	cfg.ReadConfirmed = a.ReadConfirmed
	cfg.SyncFromLastFile = a.SyncFromLastFile
	cfg.AsyncLearner = a.AsyncLearner
	cfg.AllowDivergedRejoin = a.AllowDivergedRejoin
	set := func(name string) bool {
		src, ok := e.sources[name]
		return ok && src != config.SourceDefault
	}
	if p == core.ProtocolClassic {
		for _, name := range []string{"broker-id", "read-confirmed", "sync-from-last-file", "async-learner", "ha-max-time-slave-not-catchup"} {
			if set(name) {
				return fmt.Errorf("--%s needs --ha-protocol autoswitch", name)
			}
		}
		if role == "slave" {
			for _, name := range []string{"ha-listen", "replication", "slave-timeout", "sync-acks"} {
				if set(name) {
					return fmt.Errorf("--%s is for a promoted slave: it needs --ha-protocol autoswitch", name)
				}
			}
		} else {
			for _, name := range []string{"reconnect-delay", "metadata-interval"} {
				if set(name) {
					return fmt.Errorf("--%s is for a demoted master: it needs --ha-protocol autoswitch", name)
				}
			}
		}
		return nil
	}
	if a.AllowDivergedRejoin {
		return fmt.Errorf("--allow-diverged-rejoin is for --ha-protocol classic (autoswitch truncates a diverged log itself)")
	}
	// Autoswitch: a sync put waits for every in-sync slave unless
	// --sync-acks is given.
	if !set("sync-acks") {
		cfg.SyncAcks = 0
	}
	if role == "master" {
		cfg.ReconnectDelay = o.ReconnectDelay
	}
	if role == "slave" {
		cfg.HAListen = o.HAListen
		cfg.SlaveTimeout = o.SlaveTimeout
		cfg.SyncAcks = 0
		if set("sync-acks") {
			cfg.SyncAcks = o.SyncAcks
		}
		cfg.PromoteRole = core.AsyncMaster
		if o.Replication == "sync" {
			cfg.PromoteRole = core.SyncMaster
		}
		cfg.MaxMessageSize = o.MaxMessageSize
	}
	return nil
}

// printAutoSwitchStatus prints the autoswitch part of a status: protocol,
// broker id, epoch, confirm offset, the in-sync set and each slave's
// handshake state (master), or the handshake state, refusal and last
// truncation (slave). Nothing in classic mode.
func printAutoSwitchStatus(w io.Writer, st api.Status) {
	if st.Protocol != core.ProtocolAutoSwitch.String() {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "protocol\t%s\n", st.Protocol)
	fmt.Fprintf(tw, "broker id\t%d\n", st.BrokerID)
	fmt.Fprintf(tw, "epoch\t%d (%d entries)\n", st.Epoch, st.EpochEntries)
	confirm := fmt.Sprintf("%d", st.ConfirmOffset)
	if st.ReadConfirmed {
		confirm += " (reads stop here: --read-confirmed)"
	}
	fmt.Fprintf(tw, "confirm offset\t%s\n", confirm)
	if st.Fenced != "" {
		fmt.Fprintf(tw, "FENCED\t%s\n", st.Fenced)
	}
	if st.Master == nil {
		ids := make([]string, len(st.InSync))
		for i, id := range st.InSync {
			ids[i] = strconv.FormatInt(id, 10)
		}
		fmt.Fprintf(tw, "in-sync set\t[%s]\n", strings.Join(ids, " "))
	} else {
		m := st.Master
		fmt.Fprintf(tw, "handshake\t%s\n", m.HandshakeState)
		if m.Unhealthy != "" {
			fmt.Fprintf(tw, "REFUSING\t%s\n", m.Unhealthy)
		}
		if t := m.LastTruncation; t != nil {
			fmt.Fprintf(tw, "last truncation\t%d -> %d (%s, %d records) %s ago\n", t.From, t.To, humanBytes(t.Bytes), t.Records, time.Duration(t.MsAgo)*time.Millisecond)
		}
	}
	tw.Flush()
	if st.Master == nil && len(st.Slaves) > 0 {
		fmt.Fprintf(w, "replicas:\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  BROKER ID\tADDR\tHANDSHAKE\tIN SYNC\n")
		for _, s := range st.Slaves {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%v\n", s.BrokerID, s.Addr, s.HandshakeState, s.InSync)
		}
		tw.Flush()
	}
}
