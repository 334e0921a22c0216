package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/transport"
)

// checkRoleHistory reads DATA/role, refuses a classic slave on a directory
// that last ran as a master (unless AllowDivergedRejoin, or the log is
// empty: nothing can have diverged), and settles the broker id: the
// configured one, else the stored one, else a new random one.
func (n *Node) checkRoleHistory() error {
	cfg := &n.cfg
	rec, ok, err := ReadRoleFile(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("%w (remove it to start without role history)", err)
	}
	n.roleRec, n.hasRoleRec = rec, ok
	if ok && cfg.Role == core.Slave && cfg.Protocol == core.ProtocolClassic && rec.Role == RoleMaster {
		b := n.st.Bounds()
		switch {
		case b.Max == 0:
			n.log.Info("the data directory last ran as a master but its commit log is empty: starting as a classic slave", "data", cfg.DataDir)
		case cfg.AllowDivergedRejoin:
			n.log.Warn("the data directory last ran as a master; starting as a classic slave anyway (--allow-diverged-rejoin): "+
				"bytes the new master never had stay in this log", "data", cfg.DataDir, "max_offset", b.Max, "last_role_time", rec.Time)
		default:
			return fmt.Errorf("%w: %s", ErrDivergedRejoin, DivergedRejoinMessage(cfg.DataDir, rec))
		}
	}
	switch {
	case cfg.BrokerID > 0:
		if ok && rec.BrokerID > 0 && rec.BrokerID != cfg.BrokerID {
			n.log.Warn("broker id changed: the data directory stored another one", "broker_id", cfg.BrokerID, "stored", rec.BrokerID)
		}
		n.brokerID = cfg.BrokerID
	case ok && rec.BrokerID > 0:
		n.brokerID = rec.BrokerID
	default:
		if n.brokerID, err = NewBrokerID(); err != nil {
			return err
		}
		n.log.Info("chose a broker id for this data directory", "broker_id", n.brokerID, "file", RoleFileName)
	}
	return nil
}

// recordRole writes DATA/role: role, protocol, the epoch file's last epoch,
// the broker id. Callers serialise (start, roleMu).
func (n *Node) recordRole(role string) error {
	rec := RoleRecord{Role: role, Protocol: n.cfg.Protocol.String(), BrokerID: n.brokerID, Time: time.Now()}
	if n.epochs != nil {
		if last, ok := n.epochs.Last(); ok {
			rec.Epoch = last.Epoch
		}
	}
	if err := WriteRoleFile(n.cfg.DataDir, rec); err != nil {
		return err
	}
	n.roleRec, n.hasRoleRec = rec, true
	return nil
}

// haListen is the HA address of an autoswitch node: HAListen, else (a
// slave) the API's host and port + 1, RocketMQ's convention.
func (n *Node) haListen() (string, error) {
	if n.cfg.HAListen != "" {
		return n.cfg.HAListen, nil
	}
	host, port, err := net.SplitHostPort(n.ln.Addr().String())
	if err != nil {
		return "", fmt.Errorf("node: HA listen address: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p >= 65535 {
		return "", fmt.Errorf("node: HA listen address: no port after the API's %s; set HAListen", port)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// replicaConfig is the core.Replica configuration of an autoswitch node:
// as the master it listens on ha in masterRole (sync or async).
func (n *Node) replicaConfig(tr transport.Transport, ha string, masterRole core.Role) core.ReplicaConfig {
	cfg := &n.cfg
	return core.ReplicaConfig{
		Store:     n.st,
		Transport: tr,
		Epochs:    n.epochs,
		BrokerID:  n.brokerID,
		Master: core.MasterConfig{
			ListenAddr:             ha,
			Role:                   masterRole,
			SyncAcks:               cfg.SyncAcks,
			SlaveTimeout:           cfg.SlaveTimeout,
			MaxLag:                 cfg.MaxLag,
			HousekeepingInterval:   cfg.HAIdleTimeout,
			MaxTimeSlaveNotCatchup: cfg.MaxTimeSlaveNotCatchup,
		},
		Slave: core.SlaveConfig{
			ReconnectDelay:       cfg.ReconnectDelay,
			HousekeepingInterval: cfg.HAIdleTimeout,
			ReportInterval:       cfg.HAReportInterval,
			SyncFromLastFile:     cfg.SyncFromLastFile,
			AsyncLearner:         cfg.AsyncLearner,
		},
		Logger:     n.log,
		Registerer: n.reg,
	}
}

// startReplica opens the epoch file and starts a core.Replica in the
// configured role: a master takes a new epoch (last + 1 at the max offset),
// a slave follows MasterHA. It returns the put function of the API.
func (n *Node) startReplica(tr transport.Transport) error {
	cfg := &n.cfg
	var err error
	if n.epochs, err = epoch.Open(cfg.DataDir); err != nil {
		return fmt.Errorf("node: epoch file: %w", err)
	}
	ha, err := n.haListen()
	if err != nil {
		return err
	}
	masterRole := cfg.Role
	if masterRole == core.Slave {
		masterRole = cfg.PromoteRole
	}
	n.replica, err = core.NewReplica(n.replicaConfig(tr, ha, masterRole))
	if err != nil {
		return fmt.Errorf("node: replica: %w", err)
	}
	n.replica.OnConnect(n.slaveConnected)
	if cfg.Role == core.Slave {
		n.roleMu.Lock()
		defer n.roleMu.Unlock()
		// DATA/role says "slave" once the first handshake (and truncation)
		// is done: a directory that was a master stays marked as one until
		// its log agrees with its new master's (slaveConnected).
		n.pendingSlaveRecord = !n.hasRoleRec || n.roleRec.Role != RoleSlave || n.roleRec.Protocol != cfg.Protocol.String()
		n.slaveOf = cfg.MasterHA
		if err := n.replica.BecomeSlave(cfg.MasterHA); err != nil {
			return fmt.Errorf("node: starting the slave: %w", err)
		}
		return nil
	}
	last, hadEpoch := n.epochs.Last()
	ep, err := n.replica.BecomeMaster(0)
	if err != nil {
		return fmt.Errorf("node: starting the master: %w", err)
	}
	n.log.Info("took a new epoch", "epoch", ep, "previous", last.Epoch, "had_epoch", hadEpoch, "max_offset", n.st.Bounds().Max)
	return n.recordRole(RoleMaster)
}

// slaveConnected runs (on core's slave goroutine) when the autoswitch
// slave's connection reaches TRANSFER: it runs the OnMasterConnect hooks and
// records the role (once). Both happen in other goroutines: a role change
// holds roleMu while it closes this slave client, which waits for the
// goroutine that calls this.
func (n *Node) slaveConnected() {
	n.runConnectHooks()
	n.goTracked(func() {
		n.roleMu.Lock()
		defer n.roleMu.Unlock()
		if !n.pendingSlaveRecord || n.replica.Role() != core.RoleSlave {
			return
		}
		if err := n.recordRole(RoleSlave); err != nil {
			n.log.Error("recording the role in the data directory failed", "error", err)
			return
		}
		n.pendingSlaveRecord = false
	})
}

// ChangeRole is POST /v1/role (api.RoleChanger).
func (n *Node) ChangeRole(ctx context.Context, req api.RoleRequest) error {
	if n.replica == nil {
		return api.ErrRoleUnsupported
	}
	if n.member != nil {
		return fmt.Errorf("%w: this node is a member of group %q in controller mode: the controller decides its role "+
			"(stop the master, or delete the group, to move the role)", api.ErrRoleRefused, n.cfg.Controller.Group)
	}
	n.roleMu.Lock()
	defer n.roleMu.Unlock()
	cur := n.replica.Role()
	switch req.Role {
	case api.RoleMaster:
		if cur == core.RoleMaster {
			last, _ := n.epochs.Last()
			return fmt.Errorf("%w: already the master of epoch %d", api.ErrRoleRefused, last.Epoch)
		}
		before := n.st.Bounds().Max
		ep, err := n.replica.BecomeMaster(req.Epoch)
		if errors.Is(err, epoch.ErrNotNewer) {
			return fmt.Errorf("%w: %v", api.ErrRoleRefused, err)
		}
		if err != nil {
			return fmt.Errorf("node: promote: %w", err)
		}
		n.slaveOf, n.pendingSlaveRecord = "", false
		n.log.Info("promoted to master", "epoch", ep, "max_offset", before, "ha_listen", n.replicaHAAddr())
		err = n.recordRole(RoleMaster)
		n.roleChanged(RoleChange{Role: n.masterRole()})
		return err
	case api.RoleSlave:
		if cur == core.RoleSlave && n.slaveOf == req.Master {
			return fmt.Errorf("%w: already a slave of %s", api.ErrRoleRefused, req.Master)
		}
		if err := n.replica.BecomeSlave(req.Master); err != nil {
			return fmt.Errorf("node: demote: %w", err)
		}
		n.log.Info("following a new master", "master", req.Master, "was", cur.String())
		n.slaveOf = req.Master
		if n.roleRec.Role != RoleSlave {
			n.pendingSlaveRecord = true
		}
		n.roleChanged(RoleChange{Role: core.Slave, MasterHA: req.Master, MasterAPI: req.MasterAPI})
		return nil
	}
	return fmt.Errorf("%w: unknown role %q", api.ErrRoleRefused, req.Role)
}

// masterRole is the replication of this node as a master: the configured
// role, or PromoteRole for a node started as a slave.
func (n *Node) masterRole() core.Role {
	if n.cfg.Role == core.Slave {
		return n.cfg.PromoteRole
	}
	return n.cfg.Role
}

// roleChanged records rc as the current role and runs the OnRoleChange
// hooks in registration order. Callers hold roleMu, so changes never
// overlap; core has already switched.
func (n *Node) roleChanged(rc RoleChange) {
	n.curMu.Lock()
	n.curRole, n.curMasterAPI = rc.Role, rc.MasterAPI
	n.curMu.Unlock()
	n.onConnMu.Lock()
	hooks := n.onRole
	n.connUp = false
	if n.hooksClosed {
		hooks = nil
	}
	n.onConnMu.Unlock()
	for _, f := range hooks {
		f(rc)
	}
}

// replicaHAAddr is the running master's HA address ("" when not master).
func (n *Node) replicaHAAddr() string {
	if m := n.replica.Master(); m != nil {
		return m.Addr()
	}
	return ""
}

// readLimit is api.Config.ReadLimit with --read-confirmed: a slave serves
// reads up to its confirm offset, a master everything.
func (n *Node) readLimit() int64 {
	if n.replica.Role() == core.RoleSlave {
		return n.replica.ConfirmOffset()
	}
	return math.MaxInt64
}

// replicaStatus is GET /v1/status of an autoswitch node.
func (n *Node) replicaStatus(now time.Time) api.Status {
	rs := n.replica.Status()
	var st api.Status
	switch {
	case rs.Master != nil:
		st = masterStatus(*rs.Master, now)
		st.InSync = rs.Master.SyncStateSet
		st.Fenced = rs.Master.Fenced
	case rs.Slave != nil:
		st = slaveStatus(*rs.Slave, now)
		st.ReadConfirmed = n.cfg.ReadConfirmed
	default:
		st.Role = "NONE"
	}
	st.Protocol = core.ProtocolAutoSwitch.String()
	st.BrokerID = n.brokerID
	st.Epoch, st.EpochEntries, st.ConfirmOffset = rs.Epoch, rs.EpochEntries, rs.ConfirmOffset
	return st
}
