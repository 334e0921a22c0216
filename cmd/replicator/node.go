package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

// runNode runs a master or a slave until ctx is done (SIGINT, SIGTERM).
func runNode(ctx context.Context, e *env, role string) int {
	o := &e.opts.master
	if role == "slave" {
		o = &e.opts.slave
	}
	cfg, err := nodeConfig(e, role, o)
	if err != nil {
		return e.failErr(role, err)
	}
	return e.runNodeConfig(ctx, role, cfg)
}

// runNodeConfig builds the node of cfg and runs it until ctx is done or an
// external plugin crashes; role names it in a failure.
func (e *env) runNodeConfig(ctx context.Context, role string, cfg node.Config) int {
	ctx, stopPlugins := e.plugins.watch(ctx) // plugins.go: a plugin crash cancels ctx
	n, err := node.New(cfg)
	if err != nil {
		stopPlugins()
		return e.fail("%s: %v", role, err)
	}
	err = n.Run(ctx)
	if stopPlugins() {
		e.log.Error("stopped: an external plugin crashed", "error", err)
		return exitError
	}
	if err != nil {
		e.log.Error("stopped with an error", "error", err)
		return exitError
	}
	e.log.Info("stopped")
	return exitOK
}

// nodeConfig turns the options of role into a node configuration.
func nodeConfig(e *env, role string, o *nodeOpts) (node.Config, error) {
	ps, err := e.loadPlugins() // plugins.go; load failures are logged, not fatal
	if ps == nil {
		return node.Config{}, err
	}
	e.plugins = ps
	cfg := node.Config{
		DataDir:         o.Data,
		Listen:          o.Listen,
		SegmentSize:     o.SegmentSize,
		StorePlugin:     o.Store,
		TransportPlugin: o.Transport,
		Registry:        ps.reg,
		Logger:          e.log,
		Version:         versionString(),
	}
	switch role {
	case "master":
		cfg.Role = core.AsyncMaster
		if o.Replication == "sync" {
			cfg.Role = core.SyncMaster
		}
		cfg.HAListen = o.HAListen
		cfg.SlaveTimeout = o.SlaveTimeout
		cfg.SyncAcks = o.SyncAcks
		cfg.MaxLag = o.MaxLag
		cfg.SyncFlush = o.Flush == "sync"
		cfg.MaxMessageSize = o.MaxMessageSize
		if o.MaxMessageSize > o.SegmentSize/2 {
			if _, set := e.sources["max-message-size"]; set && e.sources["max-message-size"] != config.SourceDefault {
				return cfg, usage(fmt.Errorf("--max-message-size %s must be at most half of --segment-size %s",
					config.FormatSize(o.MaxMessageSize), config.FormatSize(o.SegmentSize)))
			}
			// The default does not fit a small segment: take what fits.
			cfg.MaxMessageSize = o.SegmentSize / 2
		}
	case "slave":
		cfg.Role = core.Slave
		cfg.MasterHA = o.Master
		cfg.MasterAPI = o.MasterAPI
		cfg.ReconnectDelay = o.ReconnectDelay
		if cfg.MasterAPI == "" {
			cfg.MasterAPI = defaultMasterAPI(o.Master)
			if o.sec.MasterAPICA != "" || o.sec.MasterAPICert != "" {
				// TLS settings for the master's API mean it speaks https.
				cfg.MasterAPI = strings.Replace(cfg.MasterAPI, "http://", "https://", 1)
			}
		}
	}
	if err := e.autoSwitchConfig(role, o, &cfg); err != nil {
		return cfg, usage(err)
	}
	if err := e.nodeSecurity(role, &o.sec, &cfg); err != nil {
		return cfg, usage(err)
	}
	applyLimits(&o.limits, &cfg)
	cfg.Extensions, err = ps.extensions(role, o)
	return cfg, err
}

// nodeSecurity loads the TLS files and the token of a node (see
// docs/security.md) into cfg.
func (e *env) nodeSecurity(role string, sec *nodeSecurity, cfg *node.Config) error {
	var err error
	switch {
	case sec.TLSCert != "" || sec.TLSKey != "":
		if cfg.APITLS, err = node.ServerTLS(sec.TLSCert, sec.TLSKey, sec.TLSClientCA); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key/--tls-client-ca: %w", err)
		}
	case sec.TLSClientCA != "":
		return fmt.Errorf("--tls-client-ca needs --tls-cert and --tls-key (client certificates need TLS)")
	}
	if cfg.APIToken, err = e.apiToken(sec.APITokenFile, "--api-token-file"); err != nil {
		return err
	}
	cfg.Profiling = sec.Pprof
	if role == "master" {
		switch {
		case sec.HATLSCert != "" || sec.HATLSKey != "":
			if cfg.HA.ServerTLS, err = node.ServerTLS(sec.HATLSCert, sec.HATLSKey, sec.HATLSClientCA); err != nil {
				return fmt.Errorf("--ha-tls-cert/--ha-tls-key/--ha-tls-client-ca: %w", err)
			}
		case sec.HATLSClientCA != "":
			return fmt.Errorf("--ha-tls-client-ca needs --ha-tls-cert and --ha-tls-key (slave certificates need TLS)")
		}
		if len(sec.HAAllowCN) > 0 && sec.HATLSClientCA == "" {
			return fmt.Errorf("--ha-allow-cn needs --ha-tls-client-ca (names come from verified slave certificates)")
		}
		if cfg.HA.Allow, err = tcptransport.ParseAllow(sec.HAAllow); err != nil {
			return fmt.Errorf("--ha-allow: %w", err)
		}
		cfg.HA.AllowClientNames = sec.HAAllowCN
		cfg.HA.MaxConns, cfg.HA.MaxConnsPerIP = sec.HAMaxConns, sec.HAMaxConnsPerIP
		if cfg.APIToken != "" {
			// A demoted master's metadata syncer calls the new master's API
			// with this node's own token, as a slave does by default.
			cfg.MasterAPIClient = node.APIClient(nil, cfg.APIToken, metadataTimeout)
		}
		return nil
	}
	switch {
	case sec.HATLSCA != "":
		if cfg.HA.ClientTLS, err = node.ClientTLS(sec.HATLSCA, sec.HATLSCert, sec.HATLSKey, sec.HATLSServerName); err != nil {
			return fmt.Errorf("--ha-tls-ca/--ha-tls-cert/--ha-tls-key: %w", err)
		}
	case sec.HATLSCert != "" || sec.HATLSKey != "" || sec.HATLSServerName != "":
		return fmt.Errorf("--ha-tls-cert, --ha-tls-key and --ha-tls-server-name need --ha-tls-ca (it turns TLS on)")
	}
	// The metadata syncer calls the master's API: its own TLS settings, and
	// its own token or else this slave's.
	tok := cfg.APIToken
	if sec.MasterAPITokenFile != "" {
		if tok, err = node.ReadToken(sec.MasterAPITokenFile); err != nil {
			return fmt.Errorf("--master-api-token-file: %w", err)
		}
	}
	var tlsCfg *tls.Config
	if sec.MasterAPICA != "" || sec.MasterAPICert != "" || sec.MasterAPIKey != "" {
		if tlsCfg, err = node.ClientTLS(sec.MasterAPICA, sec.MasterAPICert, sec.MasterAPIKey, ""); err != nil {
			return fmt.Errorf("--master-api-ca/--master-api-cert/--master-api-key: %w", err)
		}
	}
	if tok != "" || tlsCfg != nil {
		cfg.MasterAPIClient = node.APIClient(tlsCfg, tok, metadataTimeout)
	}
	return nil
}

// metadataTimeout bounds one call of the metadata syncer to the master's API.
const metadataTimeout = 10 * time.Second

// apiToken is the token of --api-token-file (flag) when set, else of
// $REPLICATOR_API_TOKEN, else "".
func (e *env) apiToken(file, flag string) (string, error) {
	if file != "" {
		tok, err := node.ReadToken(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flag, err)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 && e.log != nil {
			e.log.Warn("the API token file is readable by other users; chmod 600 it", "file", file, "mode", fi.Mode().Perm().String())
		}
		return tok, nil
	}
	if v := e.lookupEnv(apiTokenEnv); v != "" {
		tok, err := node.CheckToken(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", apiTokenEnv, err)
		}
		return tok, nil
	}
	return "", nil
}

// lookupEnv returns the value of name in the process environment.
func (e *env) lookupEnv(name string) string {
	for _, kv := range e.environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// defaultMasterAPI derives the master's API URL from its HA address with
// RocketMQ's convention: HA port = listen port + 1.
func defaultMasterAPI(haAddr string) string {
	host, port, err := net.SplitHostPort(haAddr)
	if err != nil {
		return ""
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 1 {
		return ""
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(p-1))
}
