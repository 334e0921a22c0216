// Package embedetcd runs an etcd member inside the process
// (go.etcd.io/etcd/server/v3/embed) as the controller store of replicator
// controller: one member alone by default, or a member of a multi-member
// cluster described with etcd's --initial-cluster syntax
// (name=http://host:port,...), one process per member. etcd's zap logs go
// to an hclog.Logger (ZapLogger); once Close starts, the member's reports
// of its own listeners closing are logged at debug level.
//
// Close stops the member gracefully: etcd waits for open client streams
// (watches, lease keep-alives) for up to its request timeout (5 s plus two
// election timeouts) before it cuts them.
package embedetcd
