package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/replicatorhq/replicator/internal/config"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

// Defaults. The API and HA ports are RocketMQ's broker listen port and that
// port + 1 (its HA port).
const (
	defaultListen      = "127.0.0.1:10911"
	defaultHAListen    = "127.0.0.1:10912"
	defaultAPIURL      = "http://127.0.0.1:10911"
	defaultSegmentSize = "1GiB"
	minSegmentSize     = 64 << 10
	maxSegmentSize     = 64 << 30
)

// globalOpts are the options before the command.
type globalOpts struct {
	Plugins   string
	Config    string
	LogLevel  string
	LogFormat string
	// GC settings (gc.go).
	GCPercent     int
	GCMemoryLimit int64
}

// nodeOpts are the options of master and slave.
type nodeOpts struct {
	Data             string
	Listen           string
	HAListen         string // master
	Replication      string // master: async | sync
	SlaveTimeout     time.Duration
	SyncAcks         int
	MaxLag           int64  // master: async back-pressure (0: off)
	Flush            string // async | sync
	SegmentSize      int64
	MaxMessageSize   int64
	Master           string // slave: master's HA address
	MasterAPI        string // slave: master's API URL
	MetadataInterval time.Duration
	ReconnectDelay   time.Duration // slave
	Store            string
	Transport        string
	sec              nodeSecurity
	limits           nodeLimits     // limits.go
	as               autoSwitchOpts // role.go
	rem              remotingOpts   // remoting.go
}

// nodeSecurity are the TLS, token and HA access options of master and
// slave (docs/security.md).
type nodeSecurity struct {
	TLSCert, TLSKey, TLSClientCA string // API over TLS, client certificates
	APITokenFile                 string // API bearer token
	Pprof                        bool   // serve /debug/pprof/ on the API
	HATLSCert, HATLSKey          string // master: server certificate; slave: client certificate
	HATLSClientCA                string // master: require slave certificates
	HAAllow, HAAllowCN           []string
	HAMaxConns, HAMaxConnsPerIP  int
	HATLSCA, HATLSServerName     string // slave: verify the master
	// slave: calling the master's API (metadata)
	MasterAPICA, MasterAPICert, MasterAPIKey, MasterAPITokenFile string
}

// clientSecurity are the TLS and token options of put, status and tail.
type clientSecurity struct {
	CA, Cert, Key, TokenFile string
}

// apiTokenEnv holds an API bearer token itself (not a file): read by the
// nodes when --api-token-file is not set and by put, status, tail when
// --token-file is not set.
const apiTokenEnv = "REPLICATOR_API_TOKEN"

// Defaults of the HA connection limits: far above any real replica group,
// low enough to bound a flood's memory (about 20 KiB per idle connection).
const (
	defaultHAMaxConns      = "1024"
	defaultHAMaxConnsPerIP = "64"
)

func checkAllow(s string) error {
	_, err := tcptransport.ParseAllow([]string{s})
	return err
}

// apiSecurityOpts are the API's TLS and token options of master and slave.
func apiSecurityOpts(s *nodeSecurity) []*config.Option {
	return []*config.Option{
		{Name: "tls-cert", Meta: "FILE", Help: "serve the HTTP API over TLS with this PEM certificate (needs --tls-key)", Value: config.File(&s.TLSCert, true)},
		{Name: "tls-key", Meta: "FILE", Help: "PEM private key of --tls-cert", Value: config.File(&s.TLSKey, true)},
		{Name: "tls-client-ca", Meta: "FILE", Help: "require API client certificates signed by a CA in this PEM file", Value: config.File(&s.TLSClientCA, true)},
		{Name: "api-token-file", Meta: "FILE", Help: "require Authorization: Bearer <token> (the file's content) on every API route but /healthz and /readyz; default: $" + apiTokenEnv, Value: config.File(&s.APITokenFile, true)},
		{Name: "pprof", Help: "serve Go's profiling endpoints at /debug/pprof/ on the API (behind the token when one is set)", Value: config.Bool(&s.Pprof)},
	}
}

func clientSecurityOpts(c *clientSecurity) []*config.Option {
	return []*config.Option{
		{Name: "ca", Meta: "FILE", Help: "verify an https:// node against the CAs in this PEM file (default: system roots)", Value: config.File(&c.CA, true)},
		{Name: "cert", Meta: "FILE", Help: "client certificate (PEM) for a node that requires one (needs --cert-key)", Value: config.File(&c.Cert, true)},
		// Not --key: put's --key is the message's RocketMQ KEYS.
		{Name: "cert-key", Meta: "FILE", Help: "PEM private key of --cert", Value: config.File(&c.Key, true)},
		{Name: "token-file", Meta: "FILE", Help: "send Authorization: Bearer <token> (the file's content); default: $" + apiTokenEnv, Value: config.File(&c.TokenFile, true)},
	}
}

type putOpts struct {
	sec        clientSecurity
	API        string
	Topic      string
	Key        string
	Tag        string
	Queue      int
	Properties []string
	Timeout    time.Duration
	NoFollow   bool // put_client.go
	InFlight   int  // put_client.go
}

type statusOpts struct {
	sec     clientSecurity
	API     string
	JSON    bool
	Timeout time.Duration
	wait    statusWait // wait.go
}

type tailOpts struct {
	sec     clientSecurity
	API     string
	From    int64
	Follow  bool
	JSON    bool
	Max     int
	Timeout time.Duration
}

type demoOpts struct {
	Messages    int
	Size        int64
	SegmentSize int64
	Replication string
	Concurrency int
	Keep        bool
	Failover    failoverOpts // demo_failover.go
}

// options holds the parse targets of every command.
type options struct {
	global globalOpts
	master nodeOpts
	slave  nodeOpts
	put    putOpts
	status statusOpts
	tail   tailOpts
	demo   demoOpts
	bench  benchOpts      // bench.go
	role   roleOpts       // role.go: promote and demote
	ctl    controllerOpts // controller.go
	node   nodeCmdOpts    // nodecmd.go
}

func checkProperty(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("invalid property %q (want name=value, both non-empty)", s)
	}
	if strings.ContainsAny(s, "\x01\x02") {
		return fmt.Errorf("invalid property %q: contains a RocketMQ separator (\\x01 or \\x02)", s)
	}
	return nil
}

// program builds the command-line spec over o: the global options and one
// command per sub-command, each built by its own function.
func program(o *options) *config.Program {
	return &config.Program{
		Name:     "replicator",
		Synopsis: "RocketMQ-style master/slave commit-log replication, as a daemon and a CLI",
		Global:   globalOptions(&o.global),
		Commands: []*config.Command{
			masterCommand(&o.master), slaveCommand(&o.slave), putCommand(&o.put), statusCommand(&o.status),
			tailCommand(&o.tail), demoCommand(&o.demo), benchCommand(&o.bench),
			{Name: "version", Synopsis: "print the version and the builtin plugins"},
			pluginsCommand(), promoteCommand(&o.role), demoteCommand(&o.role), controllerCommand(&o.ctl), nodeCommand(&o.node),
		},
		ConfigOption: "config",
		Env:          []string{apiTokenEnv},
	}
}

// globalOptions are the options before the command (also accepted after it).
func globalOptions(g *globalOpts) []*config.Option {
	return append([]*config.Option{
		{Name: "plugins", Meta: "DIR", Help: "directory of external plugins; builtin plugins are used for names not found there", Value: config.Dir(&g.Plugins, true)},
		{Name: "config", Meta: "FILE", Help: "HCL configuration file", Value: config.String(&g.Config, true)},
		{Name: "log-level", Meta: "LEVEL", Help: "trace, debug, info, warn, error or off", Default: "info", Value: config.Enum(&g.LogLevel, "trace", "debug", "info", "warn", "error", "off")},
		{Name: "log-format", Meta: "FORMAT", Help: "text or json", Default: "text", Value: config.Enum(&g.LogFormat, "text", "json")},
	}, gcOptions(g)...)
}

// storeOpts are the store and transport options of master, slave and node;
// same names who must use the same segment size.
func storeOpts(n *nodeOpts, same string) []*config.Option {
	return []*config.Option{
		{Name: "segment-size", Meta: "SIZE", Help: "commit-log segment size; " + same + " must use the same", Default: defaultSegmentSize, Value: config.SizeMultiple(&n.SegmentSize, minSegmentSize, maxSegmentSize, 4096)},
		{Name: "store", Meta: "NAME", Help: "store plugin", Default: "commitlog", Value: config.String(&n.Store, true)},
		{Name: "transport", Meta: "NAME", Help: "transport plugin", Default: "tcp", Value: config.String(&n.Transport, true)},
	}
}

// masterCommand is `replicator master`.
func masterCommand(m *nodeOpts) *config.Command {
	return &config.Command{
		Name:     "master",
		Synopsis: "run a master: take producer writes and ship the commit log to slaves",
		Help: `Run a master node. Producers append messages over the HTTP API on --listen;
slaves connect to --ha-listen and receive the commit log with RocketMQ's
classic HA protocol. With --replication sync a put returns once --sync-acks
slaves hold the message (PUT_OK), or after --slave-timeout
(FLUSH_SLAVE_TIMEOUT), or at once when no slave is close enough
(SLAVE_NOT_AVAILABLE); the message is stored in every case. With
--replication async and --max-lag, a put waits while the slave is more than
--max-lag bytes behind it (back-pressure), then answers PUT_OK.

SIGINT or SIGTERM stops the node gracefully: it stops accepting, finishes
in-flight puts, flushes and closes the commit log, and exits 0.`,
		Options: append([]*config.Option{
			{Name: "data", Meta: "DIR", Help: "data directory; the commit log goes in DIR/commitlog", Default: "./data/master", Value: config.String(&m.Data, true)},
			{Name: "listen", Meta: "ADDR", Help: "HTTP API and metrics address", Default: defaultListen, Value: config.Addr(&m.Listen, true)},
			{Name: "ha-listen", Meta: "ADDR", Help: "HA address slaves connect to", Default: defaultHAListen, Value: config.Addr(&m.HAListen, true)},
			{Name: "replication", Meta: "MODE", Help: "async (ASYNC_MASTER) or sync (SYNC_MASTER)", Default: "async", Value: config.Enum(&m.Replication, "async", "sync")},
			{Name: "slave-timeout", Meta: "DURATION", Help: "sync replication: how long a put waits for slaves", Default: "5s", Value: config.Duration(&m.SlaveTimeout, time.Millisecond, 10*time.Minute)},
			{Name: "sync-acks", Meta: "N", Help: "sync replication: slaves that must hold a message", Default: "1", Value: config.Int(&m.SyncAcks, 1, 64)},
			{Name: "max-lag", Meta: "SIZE", Help: "async replication: a put waits (at most --slave-timeout) while the slave is more than SIZE behind it (0: never, as RocketMQ)", Default: "0", Value: config.Size(&m.MaxLag, 0, 1<<40)},
			{Name: "flush", Meta: "MODE", Help: "disk flush: async (ASYNC_FLUSH) or sync (SYNC_FLUSH)", Default: "async", Value: config.Enum(&m.Flush, "async", "sync")},
			{Name: "max-message-size", Meta: "SIZE", Help: "largest message body accepted (a put with a larger body answers 413); the stored record may add up to 33 KiB of topic, properties and header", Default: "4MiB", Value: config.Size(&m.MaxMessageSize, 1, 256<<20)},
			{Name: "ha-tls-cert", Meta: "FILE", Help: "serve the HA port over TLS with this PEM certificate (needs --ha-tls-key)", Value: config.File(&m.sec.HATLSCert, true)},
			{Name: "ha-tls-key", Meta: "FILE", Help: "PEM private key of --ha-tls-cert", Value: config.File(&m.sec.HATLSKey, true)},
			{Name: "ha-tls-client-ca", Meta: "FILE", Help: "require slave certificates signed by a CA in this PEM file (needs --ha-tls-cert)", Value: config.File(&m.sec.HATLSClientCA, true)},
			{Name: "ha-allow", Meta: "LIST", Help: "comma-separated IPs and CIDR prefixes allowed to connect to the HA port (default: all)", Value: config.CSV(&m.sec.HAAllow, checkAllow)},
			{Name: "ha-allow-cn", Meta: "LIST", Help: "comma-separated client-certificate common names or DNS names allowed on the HA port (needs --ha-tls-client-ca)", Value: config.CSV(&m.sec.HAAllowCN, nil)},
			{Name: "ha-max-conns", Meta: "N", Help: "HA connections open at once; more are closed at accept (0: no limit)", Default: defaultHAMaxConns, Value: config.Int(&m.sec.HAMaxConns, 0, 1<<20)},
			{Name: "ha-max-conns-per-ip", Meta: "N", Help: "HA connections open at once from one IP address (0: no limit)", Default: defaultHAMaxConnsPerIP, Value: config.Int(&m.sec.HAMaxConnsPerIP, 0, 1<<20)},
		}, append(append(append(apiSecurityOpts(&m.sec), storeOpts(m, "master and slaves")...), autoSwitchMasterOpts(m)...), append(limitOpts(&m.limits, true), remotingMasterOpts(m)...)...)...),
	}
}

// slaveCommand is `replicator slave`.
func slaveCommand(s *nodeOpts) *config.Command {
	return &config.Command{
		Name:     "slave",
		Synopsis: "run a slave: follow a master's commit log, serve reads",
		Help: `Run a slave node. It connects to the master's HA address (--master), appends
what the master ships, and serves reads, status and metrics on --listen; puts
answer 403 (slave write protection). It pulls the master's metadata (topics,
consumer offsets, ...) from --master-api every --metadata-interval.

SIGINT or SIGTERM stops the node gracefully and exits 0; a restarted slave
resumes from its own max offset.`,
		Options: append([]*config.Option{
			{Name: "data", Meta: "DIR", Help: "data directory; the commit log goes in DIR/commitlog", Default: "./data/slave", Value: config.String(&s.Data, true)},
			{Name: "listen", Meta: "ADDR", Help: "HTTP API and metrics address", Default: defaultListen, Value: config.Addr(&s.Listen, true)},
			{Name: "master", Meta: "HA_ADDR", Help: "the master's HA address", Default: defaultHAListen, Value: config.Addr(&s.Master, false)},
			{Name: "master-api", Meta: "URL", Help: "the master's HTTP API, for metadata (default: the master's host, HA port - 1)", Value: config.URL(&s.MasterAPI, true)},
			{Name: "reconnect-delay", Meta: "DURATION", Help: "wait before reconnecting to the master after a failure", Default: "5s", Value: config.Duration(&s.ReconnectDelay, time.Millisecond, time.Hour)},
			{Name: "metadata-interval", Meta: "DURATION", Help: "how often to pull the master's metadata", Default: "10s", Value: config.Duration(&s.MetadataInterval, 10*time.Millisecond, 24*time.Hour)},
			{Name: "ha-tls-ca", Meta: "FILE", Help: "connect to the master's HA port over TLS, verifying it against the CAs in this PEM file", Value: config.File(&s.sec.HATLSCA, true)},
			{Name: "ha-tls-cert", Meta: "FILE", Help: "client certificate (PEM) for a master that requires one (needs --ha-tls-ca and --ha-tls-key)", Value: config.File(&s.sec.HATLSCert, true)},
			{Name: "ha-tls-key", Meta: "FILE", Help: "PEM private key of --ha-tls-cert", Value: config.File(&s.sec.HATLSKey, true)},
			{Name: "ha-tls-server-name", Meta: "NAME", Help: "name to verify in the master's certificate (default: the host of --master)", Value: config.String(&s.sec.HATLSServerName, false)},
			{Name: "master-api-ca", Meta: "FILE", Help: "verify an https:// --master-api against the CAs in this PEM file (default: system roots)", Value: config.File(&s.sec.MasterAPICA, true)},
			{Name: "master-api-cert", Meta: "FILE", Help: "client certificate (PEM) for a master API that requires one (needs --master-api-key)", Value: config.File(&s.sec.MasterAPICert, true)},
			{Name: "master-api-key", Meta: "FILE", Help: "PEM private key of --master-api-cert", Value: config.File(&s.sec.MasterAPIKey, true)},
			{Name: "master-api-token-file", Meta: "FILE", Help: "bearer token for the master's API (default: this slave's own API token)", Value: config.File(&s.sec.MasterAPITokenFile, true)},
		}, append(append(append(apiSecurityOpts(&s.sec), storeOpts(s, "master and slaves")...), autoSwitchSlaveOpts(s)...), append(limitOpts(&s.limits, false), remotingSlaveOpts(s)...)...)...),
	}
}

// putCommand is `replicator put` (put_client.go runs it).
func putCommand(p *putOpts) *config.Command {
	return &config.Command{
		Name:     "put",
		Synopsis: "send messages to a master",
		Args:     "[MESSAGE...]",
		MaxArgs:  -1,
		Help: `Send each MESSAGE argument, or each line of standard input when there is
none, as one message to the master at --api, through the node's producer
stream (--in-flight at a time, in batches). Prints one line per message, in
order: its status, offset, next offset and queue offset. When --api is a
slave, the messages go to the master it names (--master-api), unless
--no-follow. A message that fails is reported on standard error, saying
whether it is "not stored" or "may be stored".

Exit status: 0 when every message is stored with PUT_OK, 3 when every message
is stored but some with another status (FLUSH_SLAVE_TIMEOUT, ...), 1 when a
message failed, 2 on bad usage.`,
		Options: append([]*config.Option{
			{Name: "api", Meta: "URL[,URL...]", Help: "the master's HTTP API; with several (the nodes of a group), put tries them in turn and follows a slave's answer to its master", Default: defaultAPIURL, Value: urlList{&p.API}},
			{Name: "topic", Meta: "TOPIC", Help: "topic ([%|a-zA-Z0-9_-], at most 127 bytes)", Default: "TopicTest", Value: config.String(&p.Topic, true)},
			{Name: "key", Meta: "KEY", Help: "message keys (RocketMQ KEYS; space-separated for several)", Value: config.String(&p.Key, false)},
			{Name: "tag", Meta: "TAG", Help: "message tag (RocketMQ TAGS)", Value: config.String(&p.Tag, false)},
			{Name: "queue", Meta: "N", Help: "queue id", Default: "0", Value: config.Int(&p.Queue, 0, 1023)},
			{Name: "property", Meta: "NAME=VALUE", Help: "a message property; repeat for several", Value: config.List(&p.Properties, checkProperty)},
			{Name: "timeout", Meta: "DURATION", Help: "connecting, and retrying a message that is not stored (no node reachable, a slave), at most this long", Default: "30s", Value: config.Duration(&p.Timeout, time.Millisecond, time.Hour)},
			{Name: "no-follow", Help: "fail when --api is a slave instead of sending to its master", Value: config.Bool(&p.NoFollow)},
			{Name: "in-flight", Meta: "N", Help: "messages sent before the first result is in (1 keeps the order of the messages in the log; more is faster, in any order)", Default: "1", Value: config.Int(&p.InFlight, 1, 65536)},
		}, clientSecurityOpts(&p.sec)...),
	}
}

// statusCommand is `replicator status`.
func statusCommand(st *statusOpts) *config.Command {
	return &config.Command{
		Name:     "status",
		Synopsis: "show a node's role, offsets and replication state",
		Help: `Print a node's role, offsets and replication state (a table, or the raw JSON
with --json). The --wait-* options first wait, at most --timeout, for the node
to be ready, to follow its master, or to reach an offset, so that a script
can start nodes in the background and go on without sleeping; when the wait
gives up, status says what it last saw and exits 1.`,
		Options: append([]*config.Option{
			{Name: "api", Meta: "URL", Help: "the node's HTTP API", Default: defaultAPIURL, Value: config.URL(&st.API, false)},
			{Name: "json", Help: "print the raw JSON status", Value: config.Bool(&st.JSON)},
			{Name: "timeout", Meta: "DURATION", Help: "request timeout; with --wait-*, the longest wait", Default: "10s", Value: config.Duration(&st.Timeout, time.Millisecond, time.Hour)},
		}, append(statusWaitOpts(&st.wait), clientSecurityOpts(&st.sec)...)...),
	}
}

// tailCommand is `replicator tail`.
func tailCommand(t *tailOpts) *config.Command {
	return &config.Command{
		Name:     "tail",
		Synopsis: "print messages from a node's commit log",
		Help: `Print the messages of a node's commit log (master or slave), one line each:
offset, topic, queue, queue offset, tags, keys and body (quoted when it is not
plain text). Starts at --from (a record's physical offset; default the oldest
message) and stops at the end of the log, or with --follow waits for new
messages until interrupted.`,
		Options: append([]*config.Option{
			{Name: "api", Meta: "URL", Help: "the node's HTTP API", Default: defaultAPIURL, Value: config.URL(&t.API, false)},
			{Name: "from", Meta: "OFFSET", Help: "physical offset to start at; -1 means the min offset", Default: "-1", Value: config.Int64(&t.From, -1, math.MaxInt64)},
			{Name: "follow", Help: "keep waiting for new messages", Value: config.Bool(&t.Follow)},
			{Name: "json", Help: "print each message as a JSON object (body in base64)", Value: config.Bool(&t.JSON)},
			{Name: "max", Meta: "N", Help: "messages per request (a page size, not a total: tail prints every message up to the end of the log)", Default: "256", Value: config.Int(&t.Max, 1, 1024)},
			{Name: "timeout", Meta: "DURATION", Help: "per-request timeout (long polls add 10s)", Default: "30s", Value: config.Duration(&t.Timeout, time.Millisecond, time.Hour)},
		}, clientSecurityOpts(&t.sec)...),
	}
}

// demoCommand is `replicator demo` (demo.go, demo_failover.go run it).
func demoCommand(d *demoOpts) *config.Command {
	return &config.Command{
		Name:     "demo",
		Synopsis: "run a master and a slave on this machine and watch them replicate",
		Help: `Start a master and a slave as two processes of this binary on free loopback
ports, in a temporary directory; write messages to the master with a progress
bar; show the slave catching up; check that the slave's commit log is
byte-identical to the master's; print a summary. Exits 0 by itself and
removes the temporary directory (keep it with --keep). Ctrl-C at any point
stops both nodes and cleans up.

With --failover: start a controller (embedded etcd) and three nodes of one
controller-mode group (sync replication unless --replication says
otherwise, 1 KiB messages unless --size does); write with --concurrency
producers; kill -9 the master and show the election (the new master and
epoch, the time from the kill to the first PUT_OK on it, the puts that
failed or had an unknown outcome); restart the old master and show it
rejoin as a slave (with the tail it cut); check that the three commit logs
end byte-identical and hold every PUT_OK message. --messages does not
apply: each step writes for --phase.`,
		Options: append([]*config.Option{
			{Name: "messages", Meta: "N", Help: "messages to write", Default: "20000", Value: config.Int(&d.Messages, 1, 10_000_000)},
			{Name: "size", Meta: "SIZE", Help: "message body size", Default: "4KiB", Value: config.Size(&d.Size, 1, 4<<20)},
			{Name: "segment-size", Meta: "SIZE", Help: "commit-log segment size (small, so the run spans several)", Default: "16MiB", Value: config.SizeMultiple(&d.SegmentSize, minSegmentSize, 1<<30, 4096)},
			{Name: "replication", Meta: "MODE", Help: "async or sync", Default: "async", Value: config.Enum(&d.Replication, "async", "sync")},
			{Name: "concurrency", Meta: "N", Help: "concurrent producers", Default: "8", Value: config.Int(&d.Concurrency, 1, 256)},
			{Name: "keep", Help: "keep the data directories and print how to restart the nodes", Value: config.Bool(&d.Keep)},
		}, failoverOptions(&d.Failover)...),
	}
}
