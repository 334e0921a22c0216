package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/controller/member"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/transport"
)

// ControllerConfig makes a node a member of a controller-mode group
// (package controller/member): the controller's etcd store assigns its
// role.
type ControllerConfig struct {
	// Store is the controller store (required); the node does not close
	// its etcd client.
	Store *etcdstore.Store
	// Group names the node's group (required).
	Group string
	// LeaseTTL is the registration's lease TTL (0: member.DefaultLeaseTTL):
	// a master fences itself at half of it without a renewal, and the
	// group elects another master once it expired.
	LeaseTTL time.Duration
	// HAAdvertise is the HA address registered for the slaves (default:
	// HAListen); APIAdvertise the API base URL registered for clients
	// (default: the node's URL).
	HAAdvertise, APIAdvertise string
	// Supervise also runs the group's elections from this node
	// (member.Config.Supervise): for an etcd cluster without a
	// replicator controller. The store's ElectionDelay applies.
	Supervise bool
}

// ErrControllerConfig is an invalid controller-mode configuration.
var ErrControllerConfig = errors.New("node: invalid controller-mode configuration")

// checkControllerConfig checks the controller-mode fields of cfg.
func (cfg *Config) checkControllerConfig() error {
	cc := cfg.Controller
	switch {
	case cc.Store == nil:
		return fmt.Errorf("%w: no controller store", ErrControllerConfig)
	case cfg.Protocol != core.ProtocolAutoSwitch:
		return fmt.Errorf("%w: controller mode needs the autoswitch protocol", ErrControllerConfig)
	case cfg.Role != core.AsyncMaster && cfg.Role != core.SyncMaster:
		return fmt.Errorf("%w: Role must be the replication as a master (AsyncMaster or SyncMaster), not %s", ErrControllerConfig, cfg.Role)
	case cfg.BrokerID <= 0:
		return fmt.Errorf("%w: a broker id (1 or more) is required", ErrControllerConfig)
	}
	if err := etcdstore.ValidGroup(cc.Group); err != nil {
		return fmt.Errorf("%w: %w", ErrControllerConfig, err)
	}
	for _, a := range []struct{ name, addr string }{{"HAListen", cfg.HAListen}, {"HAAdvertise", cc.HAAdvertise}} {
		if a.addr == "" && a.name == "HAAdvertise" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil || port == "" || port == "0" {
			return fmt.Errorf("%w: %s %q: want host:port with a fixed port (it is registered for the slaves)", ErrControllerConfig, a.name, a.addr)
		}
	}
	return nil
}

// startRole is the role extensions start with: a controller-mode node
// starts without a role and takes writes only once the controller makes
// it the master (OnRoleChange), so they start as on a slave.
func (n *Node) startRole() core.Role {
	if n.cfg.Controller != nil {
		return core.Slave
	}
	return n.cfg.Role
}

// startMember opens the epoch file and creates the member and its
// replica (no role until the member runs).
func (n *Node) startMember(tr transport.Transport) error {
	cfg := &n.cfg
	cc := cfg.Controller
	if err := cfg.checkControllerConfig(); err != nil {
		return err
	}
	var err error
	if n.epochs, err = epoch.Open(cfg.DataDir); err != nil {
		return fmt.Errorf("node: epoch file: %w", err)
	}
	apiURL := cc.APIAdvertise
	if apiURL == "" {
		apiURL = n.URL()
	}
	n.curMu.Lock()
	n.curRole = core.Slave // no writes before the controller says so
	n.curMasterAPI = ""
	n.curMu.Unlock()
	n.member, err = member.New(member.Config{
		Replica:      n.replicaConfig(tr, cfg.HAListen, cfg.Role),
		Store:        cc.Store,
		Group:        cc.Group,
		BrokerID:     n.brokerID,
		HAAddr:       cc.HAAdvertise,
		APIAddr:      apiURL,
		LeaseTTL:     cc.LeaseTTL,
		Supervise:    cc.Supervise,
		OnRoleChange: n.memberRoleChanged,
		Logger:       n.log,
		Registerer:   n.reg,
	})
	if err != nil {
		return fmt.Errorf("node: controller member: %w", err)
	}
	n.replica = n.member.Replica()
	n.replica.OnConnect(n.slaveConnected)
	return nil
}

// runMember starts the member's run loop (controller mode; nil channel
// otherwise). The channel gets Run's error if it ends by itself.
func (n *Node) runMember() <-chan error {
	if n.member == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	n.memberStop, n.memberDone = cancel, make(chan struct{})
	n.log.Info("joining the group", "group", n.cfg.Controller.Group, "broker_id", n.brokerID,
		"lease_ttl", n.leaseTTL(), "ha_advertise", n.haAdvertise(), "api_advertise", n.apiAdvertise())
	go func() {
		defer close(n.memberDone)
		if err := n.member.Run(ctx); err != nil {
			errc <- err
		}
	}()
	return errc
}

// stopMember stops the member's run loop and waits for it: a master is
// fenced and the lease revoked, so the group elects another master at
// once. No-op outside controller mode or when already stopped.
func (n *Node) stopMember() {
	if n.memberStop == nil {
		return
	}
	n.memberStop()
	<-n.memberDone
	n.memberStop = nil
	n.log.Info("left the group: lease revoked", "group", n.cfg.Controller.Group, "broker_id", n.brokerID)
}

func (n *Node) leaseTTL() time.Duration {
	if t := n.cfg.Controller.LeaseTTL; t > 0 {
		return t
	}
	return member.DefaultLeaseTTL
}

func (n *Node) haAdvertise() string {
	if a := n.cfg.Controller.HAAdvertise; a != "" {
		return a
	}
	return n.cfg.HAListen
}

func (n *Node) apiAdvertise() string {
	if a := n.cfg.Controller.APIAdvertise; a != "" {
		return a
	}
	return n.URL()
}

// memberRoleChanged follows a role change the member made (on its run
// goroutine), as ChangeRole does for POST /v1/role: DATA/role, then the
// OnRoleChange hooks of the extensions.
func (n *Node) memberRoleChanged(rc member.RoleChange) {
	n.roleMu.Lock()
	defer n.roleMu.Unlock()
	switch rc.Role {
	case core.RoleMaster:
		n.slaveOf, n.pendingSlaveRecord = "", false
		n.log.Info("the controller made this node the master", "group", n.cfg.Controller.Group, "epoch", rc.Epoch,
			"max_offset", n.st.Bounds().Max, "ha_listen", n.replicaHAAddr())
		if err := n.recordRole(RoleMaster); err != nil {
			n.log.Error("recording the role in the data directory failed", "error", err)
		}
		if n.currentRole() != core.Slave {
			return // master again at a newer epoch: nothing changes for the extensions
		}
		n.roleChanged(RoleChange{Role: n.masterRole()})
	case core.RoleSlave:
		n.log.Info("the controller named another master: following it", "group", n.cfg.Controller.Group, "master", rc.Master,
			"epoch", rc.Epoch, "master_ha", rc.MasterHA, "master_api", rc.MasterAPI)
		n.slaveOf = rc.MasterHA
		n.pendingSlaveRecord = !n.hasRoleRec || n.roleRec.Role != RoleSlave || n.roleRec.Protocol != n.cfg.Protocol.String()
		if s := n.replica.Slave(); n.pendingSlaveRecord && s != nil && s.Status().HAState == "TRANSFER" {
			// Connected before this hook ran: slaveConnected found
			// nothing pending.
			if err := n.recordRole(RoleSlave); err != nil {
				n.log.Error("recording the role in the data directory failed", "error", err)
			} else {
				n.pendingSlaveRecord = false
			}
		}
		n.roleChanged(RoleChange{Role: core.Slave, MasterHA: rc.MasterHA, MasterAPI: rc.MasterAPI})
	}
}

// memberPut is the API's put in controller mode: Member.Put (the lease
// checked before and after), with a put refused for want of a master
// marked api.ErrNoMaster (503, not stored).
func (n *Node) memberPut(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	out := n.memberPutBatch(ctx, []*record.Message{msg})
	return out[0].PutResult, out[0].Err
}

// notMasterPutErr is the error of a put a controller-mode member refused
// with core.ErrNotMaster, for the member's reading st of its group: a
// RedirectError naming the master's API when a slave knows it (403), else
// api.ErrNoMaster saying why (503, not stored).
func notMasterPutErr(st member.Status, err error) error {
	switch {
	case st.Master == controller.NoMaster:
		reason := st.NoMasterReason
		if reason == "" {
			reason = "none elected yet"
		}
		return fmt.Errorf("%w: group %s has no master (%s): %w", api.ErrNoMaster, st.Group, reason, err)
	case st.Master == st.BrokerID:
		// Elected, and not master yet (the role change runs).
		return fmt.Errorf("%w: this node (broker %d) was elected the master of group %s (epoch %d) and is taking the role: %w",
			api.ErrNoMaster, st.Master, st.Group, st.MasterEpoch, err)
	case !errors.Is(err, core.ErrSlaveWriteProtected):
		return fmt.Errorf("%w: broker %d is the master of group %s (epoch %d) but this node has no role yet: %w",
			api.ErrNoMaster, st.Master, st.Group, st.MasterEpoch, err)
	case st.MasterAPI == "":
		return fmt.Errorf("%w: broker %d is the master of group %s (epoch %d), its API address is unknown: %w",
			api.ErrNoMaster, st.Master, st.Group, st.MasterEpoch, err)
	}
	// A slave: 403 naming the master of this same reading of the group (a
	// later Config.MasterAPI call could find an election under way and
	// name none).
	return &api.RedirectError{MasterAPI: st.MasterAPI,
		Err: fmt.Errorf("%w: this node is a slave of broker %d in group %s", core.ErrSlaveWriteProtected, st.Master, st.Group)}
}

// putOrigin is api.Config.PutOrigin of an autoswitch node: the epoch of
// the epoch-file entry that holds the stored record, and this node.
func (n *Node) putOrigin(res core.PutResult) (int32, int64) {
	e, ok := n.epochs.FindByOffset(res.Offset)
	if !ok {
		return 0, n.brokerID
	}
	return e.Epoch, n.brokerID
}

// controllerStatus is GET /v1/status of a controller-mode node: the
// replica's status with the group's state as the member sees it.
func (n *Node) controllerStatus(now time.Time) api.Status {
	st := n.replicaStatus(now)
	ms := n.member.Status()
	master := ms.Master
	st.Group = ms.Group
	st.MasterBrokerID = &master
	if ms.Master != controller.NoMaster {
		st.MasterAPI = ms.MasterAPI
	}
	if st.InSync == nil {
		st.InSync = ms.InSyncSet
	}
	st.Controller = &api.ControllerStatus{Registered: ms.Registered, LeaseValid: ms.LeaseValid,
		NoMasterReason: ms.NoMasterReason, InSyncEpoch: ms.InSyncSetEpoch}
	return st
}
