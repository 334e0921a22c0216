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
// bidirectional stream (sdk/proto/producerv1, used by the client package),
// served by grpc.Server.ServeHTTP on the same http.Server: HTTP/2 with prior
// knowledge on a plain port (http.Server.Protocols), ALPN h2 with TLS. It is
// mounted with Handle, so the token, the path checks, the connection limits
// and replicator_http_requests_total{route="stream"} apply; anything but
// gRPC over HTTP/2 (or a compressed stream) answers 415 JSON. A gRPC
// message on the wire:
//
//	+------+----------------+---------------------------+
//	| 0x00 | length (4, BE) | PutRequest (protobuf)     |
//	+------+----------------+---------------------------+
//	 not compressed; length at most MaxBodyBytes + StreamBatchOverhead,
//	 refused from the header (ResourceExhausted) before any allocation
//
// Each PutRequest holds messages with sequence numbers that grow along the
// stream (from 1); each message is checked (topic, queue, body size,
// properties) and put through Backend.Put in its own goroutine, so the sync
// puts of a batch wait for the slaves together; every taken message gets
// one Result (in a PutResponse, several per response, in completion order):
// STORED with the status and offsets (and Config.PutOrigin's epoch and
// broker id), NOT_STORED with a reason (invalid, too large, slave or not
// master — both with master_api as the JSON 403's —, UNAVAILABLE for
// ErrNoMaster as the JSON 503 "stored":"no", shutting down, disk full) or
// MAYBE (fenced after it was stored, an internal error). The
// stream stops reading when its unanswered messages reach
// StreamLimits.InflightBytes (or all streams' NodeInflightBytes): a
// gatedBody keeps gRPC's handler transport, which would buffer the request
// body without bound, within one batch of what the stream took, and HTTP/2
// flow control holds the producer. A batch that does not decode, a
// sequence that does not grow, or too many messages end the stream with
// InvalidArgument, after the results of the messages already taken, with
// one log line (replicator_stream_errors_total{reason}); Drain ends streams
// with Unavailable once their messages are answered. An idle stream ends
// after StreamLimits.IdleTimeout; a client that does not read its results
// is cut after StreamLimits.WriteTimeout per response.
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
