package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// Registration with RocketMQ name servers (remoting.Registrar): with
// --namesrv-addr, a master, an autoswitch slave or a controller-mode node
// registers its remoting address as brokerAddr and its HA address as
// haServerAddr, every --register-interval and at once after each role
// change, with broker id 0 while it is the master and its own id
// otherwise, so that a RocketMQ slave of the same cluster and broker name
// gets masterAddr and haServerAddr from its own registration and syncs its
// metadata from replicator's remoting port. UNREGISTER_BROKER at a graceful
// stop. The metadata extension (metadata.go) starts and stops it.

// Defaults of the name-server options.
const (
	defaultClusterName = "DefaultCluster" // BrokerConfig.brokerClusterName
	// defaultBrokerName is the brokerName of RocketMQ's shipped
	// conf/broker.conf and of every sample configuration (BrokerConfig's own
	// default, the local host name, differs per host, so a master and a
	// slave on two machines would never pair with it).
	defaultBrokerName      = "broker-a"
	defaultRegisterPeriod  = "30s" // BrokerConfig.registerNameServerPeriod
	rocketmqVIPChannelDiff = 2     // MixAll.brokerVIPChannel: listenPort - 2
)

// namesrvOpts are the name-server options of master, slave and node.
type namesrvOpts struct {
	Addrs      []string
	Cluster    string
	BrokerName string
	Interval   time.Duration
	Advertise  string // the brokerAddr registered
	// HAAdvertise is replicator node's --ha-advertise: when set, the
	// haServerAddr registered instead of --ha-listen.
	HAAdvertise string
	// Topics: register the topic config (--namesrv-register-topics);
	// without it the registrations carry an empty topic table.
	Topics bool
}

// namesrvAddrValue is --namesrv-addr: RocketMQ's namesrvAddr list,
// separated by ";" (RocketMQ) or ",".
type namesrvAddrValue struct{ o *namesrvOpts }

func (v namesrvAddrValue) Set(s string) error {
	for _, a := range remoting.ParseNamesrvAddrs(s) {
		if err := config.CheckAddr(a, false); err != nil {
			return err
		}
		v.o.Addrs = append(v.o.Addrs, a)
	}
	return nil
}

func (v namesrvAddrValue) String() string { return strings.Join(v.o.Addrs, ";") }

// Reset lets a later source replace the list.
func (v namesrvAddrValue) Reset() { v.o.Addrs = nil }

// namesrvOptions are the name-server options (every role).
func namesrvOptions(n *nodeOpts) []*config.Option {
	o := &n.rem.ns
	return []*config.Option{
		{Name: "namesrv-addr", Meta: "LIST", Help: "RocketMQ name servers to register this broker with (RocketMQ's namesrvAddr: host:port separated by ; or ,), so that RocketMQ slaves of --cluster-name/--broker-name find this master and sync its metadata over --remoting-listen; needs a --remoting-listen address (default: none, no registration)", Value: namesrvAddrValue{o}},
		{Name: "cluster-name", Meta: "NAME", Help: "with --namesrv-addr: the cluster registered (RocketMQ's brokerClusterName)", Default: defaultClusterName, Value: config.String(&o.Cluster, true)},
		{Name: "broker-name", Meta: "NAME", Help: "with --namesrv-addr: the broker group's name registered (RocketMQ's brokerName; every member of the group, RocketMQ slaves included, uses the same; the default is that of RocketMQ's sample broker.conf)", Default: defaultBrokerName, Value: config.String(&o.BrokerName, true)},
		{Name: "register-interval", Meta: "DURATION", Help: "with --namesrv-addr: how often to register (RocketMQ's registerNameServerPeriod; name servers drop a broker 120 s after its last registration)", Default: defaultRegisterPeriod, Value: config.Duration(&o.Interval, remoting.MinRegisterInterval, remoting.MaxRegisterInterval)},
		{Name: "namesrv-register-topics", Help: "with --namesrv-addr: register the topic config, as a RocketMQ broker does (false: register the broker with an empty topic table, so that the name servers give its address to RocketMQ slaves but route no RocketMQ client to a port that serves only metadata)", Default: "true", Value: config.Bool(&o.Topics)},
		{Name: "remoting-advertise", Meta: "HOST:PORT", Help: "with --namesrv-addr: the broker address registered (RocketMQ's brokerIP1:listenPort; a RocketMQ slave reads topics at its port - 2 and the other documents at it; default: the --remoting-listen address whose port - 2 is also listened on, else the first; required when that listens on all interfaces)", Value: config.Addr(&o.Advertise, false)},
	}
}

// namesrvWiring is the checked configuration of the registration; the
// registrar runs from the metadata extension's Start to its Close.
type namesrvWiring struct {
	addrs      []string
	cluster    string
	name       string
	interval   time.Duration
	brokerAddr string
	haAddr     string
	brokerID   int64 // --broker-id; 0: the id in DIR/role
	listen     []string
	topics     bool // --namesrv-register-topics
	advertised bool // --remoting-advertise given: registered even when nothing is served here

	mu  sync.Mutex
	reg *remoting.Registrar
	id  int64 // the broker's own id (slave role)
}

// newNamesrvWiring checks the name-server options of role against the
// remoting listen addresses; nil without --namesrv-addr.
func newNamesrvWiring(role string, o *nodeOpts, listen []string) (*namesrvWiring, error) {
	ns := &o.rem.ns
	if len(ns.Addrs) == 0 {
		return nil, nil
	}
	if role == "slave" && o.as.Protocol != "autoswitch" {
		return nil, usage(errors.New("--namesrv-addr on a slave needs --ha-protocol autoswitch (a classic slave never serves remoting)"))
	}
	if role == "slave" && o.as.BrokerID == 0 {
		// A fresh slave stores its chosen id only once it has followed a
		// master; RocketMQ slaves, too, are given their brokerId.
		return nil, usage(errors.New("--namesrv-addr on a slave needs --broker-id (the id it registers while it is a slave)"))
	}
	if len(listen) == 0 {
		return nil, usage(errors.New("--namesrv-addr needs --remoting-listen: the registered broker address is where RocketMQ slaves read this master's metadata"))
	}
	w := &namesrvWiring{addrs: ns.Addrs, cluster: ns.Cluster, name: ns.BrokerName, interval: ns.Interval, brokerID: o.as.BrokerID, listen: listen,
		topics: ns.Topics, advertised: ns.Advertise != ""}
	w.brokerAddr = ns.Advertise
	if w.brokerAddr == "" {
		w.brokerAddr = pickBrokerAddr(listen)
	}
	host, port, err := net.SplitHostPort(w.brokerAddr)
	if err != nil || port == "0" || host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		return nil, usage(fmt.Errorf("--remoting-advertise: the broker address %q cannot be dialled (no host, all interfaces or port 0); set --remoting-advertise HOST:PORT", w.brokerAddr))
	}
	ha := o.HAListen
	if ns.HAAdvertise != "" { // replicator node: what the other nodes dial
		ha = ns.HAAdvertise
	}
	if ha == "" { // a slave's default: the --listen host, its port + 1
		if ha = defaultSlaveHAListen(o.Listen); ha == "" {
			return nil, usage(fmt.Errorf("--namesrv-addr: cannot derive the HA address from --listen %q; set --ha-listen", o.Listen))
		}
	}
	if w.haAddr, err = haServerAddr(ha, host); err != nil {
		return nil, usage(fmt.Errorf("--namesrv-addr: %w", err))
	}
	return w, nil
}

// pickBrokerAddr returns the address of listen whose port - 2 (the VIP
// channel) is listened on too, on the same host, else the first.
func pickBrokerAddr(listen []string) string {
	for _, a := range listen {
		if vipAddr(a) != "" && slices.Contains(listen, vipAddr(a)) {
			return a
		}
	}
	return listen[0]
}

// vipAddr is addr's VIP channel: same host, port - 2 ("" when addr does
// not parse or its port is too small).
func vipAddr(addr string) string { return portBelow(addr, rocketmqVIPChannelDiff) }

// defaultSlaveHAListen is the slave's --ha-listen default (role.go): the
// --listen host, its port + 1.
func defaultSlaveHAListen(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p >= 65535 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1))
}

// haServerAddr is the HA address registered: ha itself, or, when it
// listens on all interfaces, the broker address's host with ha's port
// (RocketMQ's brokerIP2 defaults to brokerIP1).
func haServerAddr(ha, brokerHost string) (string, error) {
	host, port, err := net.SplitHostPort(ha)
	if err != nil || port == "0" {
		return "", fmt.Errorf("the HA address %q has no fixed port to register", ha)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = brokerHost
	}
	return net.JoinHostPort(host, port), nil
}

// registration is what to register for role (0 while master).
func (w *namesrvWiring) registration(role core.Role) remoting.BrokerRegistration {
	id := remoting.MasterID
	if role == core.Slave {
		id = w.id
	}
	return remoting.BrokerRegistration{ClusterName: w.cluster, BrokerName: w.name, BrokerAddr: w.brokerAddr, BrokerID: id, HAServerAddr: w.haAddr}
}

// start starts registering in the node's starting role and follows its
// role changes. A nil wiring does nothing.
func (w *namesrvWiring) start(env node.ExtensionEnv, st meta.Source) error {
	if w == nil {
		return nil
	}
	log := env.Logger.Named("namesrv")
	w.id = w.brokerID
	if w.id == 0 {
		// An autoswitch node without --broker-id: the id it chose and stored.
		if rec, ok, err := node.ReadRoleFile(env.DataDir); err == nil && ok {
			w.id = rec.BrokerID
		}
	}
	if w.id <= 0 && env.Role == core.Slave {
		return usage(errors.New("--namesrv-addr: no broker id for this slave (set --broker-id)"))
	}
	if v := vipAddr(w.brokerAddr); !slices.Contains(w.listen, v) {
		log.Warn("RocketMQ slaves read topics at the registered broker address's port - 2 (their VIP channel), which --remoting-listen does not list; list both ports", "broker_addr", w.brokerAddr, "vip_addr", v)
	}
	topics := metadata.NewRemotingHandler(st, env.Logger)
	reg, err := remoting.NewRegistrar(remoting.RegistrarConfig{
		Namesrvs: w.addrs,
		Topics: func(ctx context.Context) ([]byte, error) {
			resp := topics.ServeRemoting(ctx, &remoting.Command{Code: remoting.GetAllTopicConfig, Serialize: remoting.JSON})
			if resp == nil || resp.Code != remoting.Success {
				remark := ""
				if resp != nil {
					remark = resp.Remark
				}
				return nil, fmt.Errorf("reading the topic config failed: %s", remark)
			}
			if !w.topics {
				return withoutTopics(resp.Body)
			}
			return resp.Body, nil
		},
		Interval:   w.interval,
		Logger:     log,
		Registerer: env.Registerer,
	})
	if err != nil {
		return err
	}
	first := w.registration(env.Role)
	log.Info("registering with RocketMQ name servers", "namesrv", strings.Join(w.addrs, ";"), "cluster", w.cluster, "broker_name", w.name,
		"broker_addr", w.brokerAddr, "ha_addr", w.haAddr, "broker_id", first.BrokerID, "interval", w.interval, "topics", w.topics)
	if err := reg.Start(first); err != nil {
		return err
	}
	w.mu.Lock()
	w.reg = reg
	w.mu.Unlock()
	env.OnRoleChange(func(rc node.RoleChange) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.reg != nil {
			w.reg.Update(w.registration(rc.Role))
		}
	})
	return nil
}

// withoutTopics is the TopicConfigSerializeWrapper wrapper with an empty
// topicConfigTable and its other members (the data version) kept: a name
// server then keeps the broker's addresses for the slaves of its group and
// routes no topic to it.
func withoutTopics(wrapper []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(wrapper, &m); err != nil {
		return nil, fmt.Errorf("the topic config is not a JSON object: %w", err)
	}
	m["topicConfigTable"] = json.RawMessage("{}")
	return json.Marshal(m)
}

// stop unregisters from the name servers (a graceful stop) and stops the
// registrar. Unregistration failures are logged and counted, not returned:
// the name servers drop the broker 120 s later anyway.
func (w *namesrvWiring) stop() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	reg := w.reg
	w.reg = nil
	w.mu.Unlock()
	if reg != nil {
		_ = reg.Close(context.Background())
	}
	return nil
}

// startRegistrar starts the name-server registration, when configured
// (the metadata extension's Start; st is the node's metadata).
func (w *remotingWiring) startRegistrar(env node.ExtensionEnv, st meta.Source) error {
	if w == nil {
		return nil
	}
	if w.ns != nil && !w.ns.advertised && w.defaultSkipped() {
		// Register only what is served: the broker address would be the
		// default remoting port another process holds.
		env.Logger.Named("namesrv").Warn("not registering with the name servers: the default --remoting-listen address is held by another process, so this node serves no remoting; set --remoting-listen (and --remoting-advertise)",
			"broker_addr", w.ns.brokerAddr, "namesrv", strings.Join(w.ns.addrs, ";"))
		return nil
	}
	return w.ns.start(env, st)
}

// stopRegistrar unregisters and stops the registration (the metadata
// extension's Close, before the remoting server stops).
func (w *remotingWiring) stopRegistrar() error {
	if w == nil {
		return nil
	}
	return w.ns.stop()
}
