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
//	          "offset": N, "next_offset": M, "queue_offset": Q}
//	         (RocketMQ counts all four statuses as stored on the master)
//	     400 bad topic, queue, property, empty body or unknown query parameter
//	     403 the node is a slave (slave write protection)
//	     413 body larger than the limit
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
//	GET  /metrics     Prometheus exposition of the node's registry
//	GET  /healthz     200 {"status": "ok"} while the process serves
//	GET  /readyz      200 {"status": "ready"} once started; 503 while starting or shutting down
//
// A method a route does not take answers 405 with an Allow header, an unknown
// path 404. Handlers are instrumented with replicator_http_requests_total
// {route, code} and replicator_http_request_duration_seconds{route}.
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
// LimitListener bounds the open connections, closing those over the limit
// at accept (replicator_http_refused_connections_total).
package api
