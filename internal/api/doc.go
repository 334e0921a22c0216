// Package api is the HTTP API of a replicator node (master or slave), served
// on --listen. Every answer is JSON with Content-Type application/json, except
// /metrics (Prometheus text exposition). Errors are {"error": "<message>"}.
//
//	POST /v1/topics/{topic}/messages[?queue=Q&tags=T&keys=K]
//	     body: the message body (raw bytes, 1 byte to Config.MaxBodyBytes)
//	     headers: X-Replicator-Property: name=value[, name=value...]  (repeatable;
//	              names and values are URL-query-escaped when they contain ',', '=',
//	              '%' or non-ASCII bytes)
//	     200 {"status": "PUT_OK"|"FLUSH_DISK_TIMEOUT"|"FLUSH_SLAVE_TIMEOUT"|"SLAVE_NOT_AVAILABLE",
//	          "offset": N, "next_offset": M, "queue_offset": Q,
//	          "epoch": E, "broker_id": B}   (epoch, broker_id: Config.PutOrigin)
//	         (RocketMQ counts all four statuses as stored on the master)
//	     400 bad topic, queue, property, empty body or unknown query parameter
//	     403 the node is a slave (slave write protection); "master_api" and a
//	         Location header name the master when known (a RedirectError's,
//	         else Config.MasterAPI's)
//	     503 core.ErrFenced: the master is being demoted; the message says
//	         whether the put was stored here (it waited for slaves and may be
//	         cut when the node rejoins) or not ("stored": "maybe"|"no")
//	     503 ErrNoMaster: no master to take the put (controller mode, an
//	         election): why, and "stored": "no"
//	     413 body larger than the limit
//	     507 the disk is full (ENOSPC, IsDiskFull): not stored; puts resume by
//	         themselves once there is room. /readyz answers 503 "disk full"
//	         for DiskFullHold (5 s) after such a put, or until one is stored,
//	         replicator_http_disk_full is 1 meanwhile and
//	         replicator_http_disk_full_puts_total counts them. Failed puts are
//	         logged at ERROR at most once per PutErrorLogInterval (10 s) per
//	         kind (disk_full, other), with suppressed=N.
//	     503 the node is shutting down
//
//	GET  /v1/messages?offset=N&max=K&wait=D
//	     offset: physical offset of a record (default: the min offset);
//	     max: 1..1024 records (default 32); wait: long-poll up to D (e.g. 10s,
//	     at most 30s) when there is nothing at offset yet.
//	     200 {"messages": [{"offset", "size", "topic", "queue_id", "queue_offset", "tags", "keys",
//	          "properties", "body" (base64), "body_crc", "flag", "sys_flag",
//	          "born_timestamp", "store_timestamp", "born_host", "store_host"}],
//	          "next_offset": M, "max_offset": X}
//	         The answer holds at most Config.MaxReadBytes of bodies (at least
//	         one record); continue from next_offset.
//	     400 bad parameter or an offset that is not a record boundary
//	     416 offset outside [min_offset, max_offset]
//
//	GET  /v1/status   {"role", "max_offset", "min_offset", "flushed_offset", "segment_size",
//	                   "ha_addr", "slaves": [{"addr", "ack_offset", "lag_bytes",
//	                   "last_ack_ms_ago", ...}]   (master)
//	                   "master": {"addr", "connected", "ack_sent", "last_error",
//	                   "segment_error", ...}}     (slave)
//	POST /v1/role     {"role": "master"[, "epoch": N]} | {"role": "slave", "master": "HOST:PORT"}
//	     (at most MaxRoleBody bytes, unknown fields refused; Config.Roles)
//	     200 the new status (as GET /v1/status)
//	     400 bad JSON, role, epoch or master address
//	     409 no Config.Roles (classic mode), ErrRoleUnsupported or ErrRoleRefused
//	         (already that role, an epoch not newer than the last)
//	GET  /metrics     Prometheus exposition of the node's registry
//	GET  /healthz     200 {"status": "ok"} while the process serves
//	GET  /readyz      200 {"status": "ready"} once started; 503 while starting, shutting
//	                  down, or with a full disk ({"status": "disk full"}). A slave
//	                  that lost its master stays 200: it still serves reads.
//	GET  /readyz?following
//	                  as /readyz; then a slave answers 200 {"status": "following",
//	                  "master", "last_frame_ms_ago"} only while connected to its
//	                  master and replicating (no segment_error, not unhealthy),
//	                  else 503 {"status": "not following", "error"}; a master
//	                  200 (it follows nobody)
//
// With Config.ReadLimit (a slave's --read-confirmed), GET /v1/messages serves
// only records ending at or below ReadLimit() and reports it as max_offset;
// long polls look at it every readLimitPoll. GET /v1/status keeps the
// store's offsets.
//
// Routes are net/http ServeMux patterns with their method
// ("POST /v1/topics/{topic}/messages", the topic read with r.PathValue; a
// GET pattern also takes HEAD), mounted with Server.Handle under a metrics
// label. A method a route does not take answers 405 with an Allow header
// (the methods mounted on that path, sorted) and a JSON error, counted
// under that route's label; a path no pattern has answers 404, route
// "other"; a path whose pattern ends in a slash redirects there (307) as
// ServeMux does, whatever the method. Both go through the fallback that
// Server mounts at "/", which asks the mux which other methods the path
// takes. Handlers are instrumented with replicator_http_requests_total
// {route, code} and replicator_http_request_duration_seconds{route}.
//
// # Producer stream
//
// POST /replicator.producer.v1.Producer/Put (StreamPath) is a gRPC
// bidirectional stream (sdk/proto/producerv1, used by the client package)
// on the API port, served two ways (see "Connections"): on gRPC's own
// HTTP/2 transport (grpc.Server.Serve) for the connections a Port hands to
// it, and by grpc.Server.ServeHTTP behind the http.Server for gRPC over
// ALPN h2 (clients before producerv1.ALPNProtocol, grpc-go's own TLS
// credentials). On the second path it is mounted with Handle, so the
// token, the path checks and replicator_http_requests_total{route=
// "stream"} apply, and anything but gRPC over HTTP/2 (or a compressed
// stream) answers 415 JSON; on the first a stream interceptor gives it the
// same token check (gRPC status Unauthenticated, which is also what a
// gRPC client makes of the 401), the same auth-failure counts, request
// metrics (route "stream", code 200 or 401) and debug request line (with
// transport=grpc). A gRPC message on the wire:
//
//	+------+----------------+---------------------------+
//	| 0x00 | length (4, BE) | PutRequest (protobuf)     |
//	+------+----------------+---------------------------+
//	 the protobuf encoding of producer.proto, written and read by
//	 internal/producerwire's hand-written codec (the same bytes)
//	 not compressed; length at most MaxBodyBytes + StreamBatchOverhead,
//	 refused from the header (ResourceExhausted) before any allocation
//
// Each PutRequest holds messages with sequence numbers that grow along the
// stream (from 1); each message is checked (topic, queue, body size,
// properties), and the accepted messages of a batch are put together
// through Backend.PutBatch (one append run and one replica wait for the
// batch; a batch that waited for in-flight budget goes as two or more) on
// one of the stream's kept worker goroutines (the goroutine that received
// the batch puts its last job itself and hands the receiving on to a kept
// worker), so the batches of a stream wait for the slaves concurrently; a
// job sends its own results, and the results of jobs that queue behind a
// send in progress go out with it in one PutResponse; every taken message gets one Result
// (in a PutResponse, several per response, in completion order):
// STORED with the status and offsets (and Config.PutOrigin's epoch and
// broker id), NOT_STORED with a reason (invalid, too large, slave or not
// master — both with master_api as the JSON 403's —, UNAVAILABLE for
// ErrNoMaster as the JSON 503 "stored":"no", shutting down, disk full) or
// MAYBE (fenced after it was stored, an internal error). The
// stream stops reading when its unanswered messages reach
// StreamLimits.InflightBytes (or all streams' NodeInflightBytes), and
// HTTP/2 flow control holds the producer: gRPC's own transport reads at
// most the stream's window (1 MiB) ahead; behind the http.Server a
// gatedBody keeps gRPC's handler transport, which would buffer the request
// body without bound, within one batch of what the stream took. A batch that does not decode, a
// sequence that does not grow, or too many messages end the stream with
// InvalidArgument, after the results of the messages already taken, with
// one log line (replicator_stream_errors_total{reason}); Drain ends streams
// with Unavailable once their messages are answered. An idle stream ends
// after StreamLimits.IdleTimeout (behind the http.Server a read deadline;
// on gRPC's transport, which has none, a timer in the stream that waits
// while messages are unanswered); a client that does not read its results
// is cut after StreamLimits.WriteTimeout per response (behind the
// http.Server the stream's write deadline; on gRPC's transport the
// connection is closed, with a warning).
//
// # Connections
//
// A node serves its API with a Port (Server.NewPort): one listener
// (LimitListenerPerIP below it), one http.Server (Server.HTTPServer's
// limits) that accepts every connection, does the TLS handshake and reads
// the first bytes, and one gRPC server (grpc.NewServer) that takes the
// connections the http.Server hands off through its TLSNextProto hooks:
//
//	accept (connection limits) --> http.Server
//	  cleartext: first bytes == "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
//	             (HTTP/2 prior knowledge, read under ReadHeaderTimeout)
//	                 yes --> gRPC's transport (the 24 bytes replayed)
//	                 no  --> HTTP/1.1: JSON routes
//	  TLS: ALPN, in the server's order of preference
//	      "replicator-grpc" (producerv1.ALPNProtocol) --> gRPC's transport
//	      "h2"        --> net/http's HTTP/2: JSON routes, and the stream
//	                      through grpc.Server.ServeHTTP (older clients)
//	      "http/1.1"  --> HTTP/1.1: JSON routes
//
// net/http's HTTP/2 server is configured in NewPort (x/net/http2) so that
// the cleartext hook can be replaced: a JSON client using HTTP/2 with
// prior knowledge on a cleartext port (curl --http2-prior-knowledge)
// reaches gRPC's transport, which answers 415 (content type not gRPC);
// curl's defaults (HTTP/1.1 for http://, ALPN h2 or HTTP/1.1 for https://)
// reach the JSON routes. A handed-off connection counts as busy for the
// connection limit (never closed to make room) until gRPC closes it: gRPC
// closes a connection without streams after ServerLimits.IdleTimeout
// (MaxConnectionIdle). gRPC's transport takes the HTTP/2 limits of the
// http.Server as options (MaxConcurrentStreams, the 1 MiB stream and 4 MiB
// connection windows, MaxHeaderBytes as the header list size), bounds the
// client's preface and settings by ReadHeaderTimeout (ConnectionTimeout),
// and accepts keepalive pings every 5 s or more, also without streams (the
// client pings every 10 s). A handed-off connection that opened no stream
// when it closes (garbage after the preface, silent past the timeout) is
// logged at debug with the bytes it sent. Port.Shutdown stops both servers
// gracefully (call Server.Drain first); Port.Close cuts every connection.
//
// # Abuse and authentication
//
// Before routing, a path that is not clean ("..", "." or empty segments,
// also when %-encoded), not UTF-8, longer than MaxPathBytes, or holding
// control characters or backslashes answers 400 (net/http would otherwise
// redirect it) and counts in replicator_http_rejected_paths_total.
//
// With Config.Token set, every route except /healthz and /readyz needs
// "Authorization: Bearer <token>" (scheme case-insensitive); without it or
// with another token the answer is 401 with WWW-Authenticate: Bearer and a
// JSON error, counted in replicator_http_auth_failures_total{reason=
// "missing"|"invalid"}. Routes mounted by extensions with Handle are
// covered too. The comparison hashes both sides (SHA-256) and compares in
// constant time.
//
// Server.HTTPServer builds the http.Server with ServerLimits (header and
// body read timeouts against slow clients, idle timeout, header bytes), and
// LimitListenerPerIP bounds the open connections, in all and per IP
// address: at a limit a new connection first closes the longest-idle one
// (replicator_http_evicted_connections_total; idle state comes from the
// server's ConnState hook), and is closed at accept only when none is idle
// (replicator_http_refused_connections_total{reason}). Its connections also
// rewrite the plain-text answers net/http writes before any handler (431,
// 400, 501) as JSON; over TLS (the listener is below it) they stay text.
package api
