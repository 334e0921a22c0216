package main

import (
	"time"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/plugins/metadata"
)

// nodeLimits are the resource limits of master and slave: the API's
// connections and the metadata store (docs/security.md, "Limits").
type nodeLimits struct {
	APIMaxConns       int
	APIMaxConnsPerIP  int
	APIIdleTimeout    time.Duration
	MetadataMaxDocs   int
	MetadataMaxTotal  int64
	HAMaxTransferRate int64 // master
}

// Defaults of nodeLimits, as flag values.
const (
	defaultAPIMaxConns      = "1024" // api.DefaultMaxConns
	defaultAPIMaxConnsPerIP = "256"  // api.DefaultMaxConnsPerIP
	defaultAPIIdleTimeout   = "2m"   // api.DefaultIdleTimeout
	defaultMetadataMaxDocs  = "256"  // metadata.DefaultMaxDocuments
	defaultMetadataMaxTotal = "64MiB"
)

// limitOpts are the options of nodeLimits (master: with the HA ones).
func limitOpts(l *nodeLimits, master bool) []*config.Option {
	var ha []*config.Option
	if master {
		ha = []*config.Option{
			{Name: "ha-max-transfer-rate", Meta: "SIZE", Help: "bytes per second the master sends on each HA connection, at most (RocketMQ FlowMonitor; bounds what catch-up slaves take from the put path; 0: no limit)", Default: "0", Value: config.Size(&l.HAMaxTransferRate, 0, 1<<40)},
		}
	}
	return append(ha, []*config.Option{
		{Name: "api-max-conns", Meta: "N", Help: "API connections open at once; at the limit the longest-idle one is closed for a new one, else the new one is refused (0: no limit)", Default: defaultAPIMaxConns, Value: config.Int(&l.APIMaxConns, 0, 1<<20)},
		{Name: "api-max-conns-per-ip", Meta: "N", Help: "API connections open at once from one IP address, idle ones closed first as for --api-max-conns (0: no limit)", Default: defaultAPIMaxConnsPerIP, Value: config.Int(&l.APIMaxConnsPerIP, 0, 1<<20)},
		{Name: "api-idle-timeout", Meta: "DURATION", Help: "close API keep-alive connections idle this long", Default: defaultAPIIdleTimeout, Value: config.Duration(&l.APIIdleTimeout, time.Second, time.Hour)},
		{Name: "metadata-max-documents", Meta: "N", Help: "metadata documents the node keeps; a PUT (or a slave's sync) adding more answers 507", Default: defaultMetadataMaxDocs, Value: config.Int(&l.MetadataMaxDocs, 1, 1<<20)},
		{Name: "metadata-max-total-size", Meta: "SIZE", Help: "sum of the metadata document sizes the node keeps; a PUT (or a slave's sync) passing it answers 507", Default: defaultMetadataMaxTotal, Value: config.Size(&l.MetadataMaxTotal, 1, 1<<40)},
	}...)
}

// applyLimits copies the API limits into a node configuration: a flag at
// 0 (no limit) is a negative node value.
func applyLimits(l *nodeLimits, cfg *node.Config) {
	noLimit := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	cfg.APIMaxConns = noLimit(l.APIMaxConns)
	cfg.APIMaxConnsPerIP = noLimit(l.APIMaxConnsPerIP)
	cfg.APIIdleTimeout = l.APIIdleTimeout
	cfg.HA.MaxTransferRate = l.HAMaxTransferRate
}

// The defaults above are the packages' own.
var (
	_ = [1]struct{}{}[api.DefaultMaxConns-1024]
	_ = [1]struct{}{}[api.DefaultMaxConnsPerIP-256]
	_ = [1]struct{}{}[metadata.DefaultMaxDocuments-256]
	_ = [1]struct{}{}[metadata.DefaultMaxTotalSize-64<<20]
	_ = [1]struct{}{}[api.DefaultIdleTimeout-2*time.Minute]
)
