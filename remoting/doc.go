// Package remoting is the one owner of RocketMQ's remoting format in
// replicator: the frame, both header serialisations, the flag bits, opaque
// ids, the request and response codes replicator uses, a client (one call
// at a time, as RocketMQ's invokeSync) and a server (bounded frames, idle
// timeout, metrics). Replicator speaks it for metadata only (the slave's
// SlaveSynchronize; rocketmq-ha-spec.md section 8, 8.5 for the frame): the
// plugins/metadata package maps the codes to its documents.
//
// # Frame
//
// Big-endian. length counts every byte after itself:
//
//	0            4        5                 8              8+H
//	+------------+--------+-----------------+---------------+---------------+
//	| length i32 | serial | header length H |    header     |     body      |
//	| = 4+H+B    | type u8|   u24           |   H bytes     | B = length-4-H|
//	+------------+--------+-----------------+---------------+---------------+
//
// serial type 0 is JSON, 1 is ROCKETMQ (binary). A whole frame, the length
// field included, is at most the reader's bound: DefaultMaxFrameSize =
// 16 MiB, RocketMQ's NettyDecoder limit (com.rocketmq.remoting.
// frameMaxLength = 16777216, checked by Netty on length + 4). A length
// below 4, over the bound, or a header length over length − 4, or an
// unknown serialize type is malformed; the reader checks the length before
// allocating anything for the frame, and then grows its buffer as the bytes
// arrive (a peer announcing 16 MiB and sending nothing costs 64 KiB).
//
// # JSON header (serialize type 0)
//
// What fastjson writes for a RemotingCommand: members in alphabetical
// order, null ones left out, enums by name:
//
//	{"code":21,"extFields":{"topic":"T"},"flag":0,"language":"JAVA",
//	 "opaque":7,"remark":"...","serializeTypeCurrentRPC":"JSON","version":0}
//
// The decoder takes the members in any order, ignores unknown ones,
// requires code, and reads language by name (a name it does not know is
// OTHER) or by ordinal, as fastjson also accepts.
//
// # ROCKETMQ header (serialize type 1)
//
// RocketMQSerializable, big-endian:
//
//	 0       2      3        5        9        13          17      17+R       21+R
//	 +-------+------+--------+--------+--------+-----------+-------+----------+------------+
//	 | code  | lang | version| opaque | flag   | remark len| remark| ext len E| ext fields |
//	 | i16   | u8   | i16    | i32    | i32    | i32 = R   | UTF-8 | i32      | E bytes    |
//	 +-------+------+--------+--------+--------+-----------+-------+----------+------------+
//
//	ext fields, repeated until E bytes are used:
//	 +--------------+-------+----------------+-------+
//	 | key len i16  | key   | value len i32  | value |
//	 +--------------+-------+----------------+-------+
//
// Every length is checked against the bytes left in the header (negative
// lengths and overruns are malformed), strings must be UTF-8, and the ext
// fields must end exactly at the end of the header. A remark of length 0
// is RocketMQ's null.
//
// # Flags, opaque, codes
//
// flag bit 0 (RPC_TYPE) marks a response, bit 1 (RPC_ONEWAY) a request that
// wants none. A response carries its request's opaque; Client numbers its
// requests 1, 2, ... per connection and skips responses to other opaques.
// The server answers in the serialize type of the request, as RocketMQ.
// Codes: GET_ALL_TOPIC_CONFIG 21, GET_ALL_CONSUMER_OFFSET 43,
// GET_ALL_DELAY_OFFSET 45, GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201, and the
// 5.x GET_ALL_MESSAGE_REQUEST_MODE 402 and GET_TIMER_METRICS 61, the
// name server's REGISTER_BROKER 103 and UNREGISTER_BROKER 104; responses SUCCESS 0,
// SYSTEM_ERROR 1, REQUEST_CODE_NOT_SUPPORTED 3, whose remark RocketMQ
// writes as " request type CODE not supported" (NotSupportedRemark).
// Language codes follow LanguageCode.java (JAVA 0 ... GO 9 ... NODE_JS 13);
// replicator sends GO.
//
// # Server
//
// Server.Serve(ln) runs one goroutine per connection: read a frame
// (bounded by ServerConfig.MaxFrameSize), call the Handler, write the
// response. A malformed frame, a frame over the bound or a stream cut
// inside a frame closes the connection with one log line (Warn) and a
// count in replicator_remoting_errors_total{reason}; a connection that
// sends nothing for ServerConfig.IdleTimeout (default 120 s, RocketMQ's
// serverChannelMaxIdleTimeSeconds) is closed, and so is one whose frame
// takes longer than that to arrive whole (the deadline is set once per
// frame, so trickling bytes does not keep a connection alive). Responses sent to the server
// are ignored; oneway requests get no answer. Access control, connection
// limits and TLS come from the listener (the daemon uses the tcp
// transport's listener, as for the HA port). Metrics:
//
//	replicator_remoting_requests_total{code}   counter, by request code ("other" beyond ServerConfig.MetricCodes)
//	replicator_remoting_errors_total{reason}   counter, connections closed on an error
//	replicator_remoting_connections_total      counter, connections accepted
//	replicator_remoting_open_connections       gauge
//
// # Name-server registration
//
// namesrv.go builds a broker's REGISTER_BROKER (103) and UNREGISTER_BROKER
// (104) requests as RocketMQ 5 sends them: a JSON header, language GO,
// version RegisterVersion (413, V5_0_0; a name server reads the body as a
// RegisterBrokerBody only from V3_0_11), ext fields brokerAddr, brokerId,
// brokerName, clusterName, haServerAddr, enableActingMaster "false",
// compressed "false" and bodyCrc32 (CRC-32 IEEE of the body & 0x7FFFFFFF,
// decimal); the body
//
//	{"filterServerList":[],"topicConfigSerializeWrapper":WRAPPER}
//
// where WRAPPER is the broker's GET_ALL_TOPIC_CONFIG answer. The answer's
// ext fields masterAddr and haServerAddr (present for a broker id other
// than 0 whose group has a live id-0 broker) are read bounded to
// MaxNamesrvAddrLen bytes; a code other than SUCCESS is ErrNamesrv.
// UNREGISTER_BROKER carries brokerAddr, brokerId, brokerName and
// clusterName, no body.
//
// Registrar (registrar.go) runs the schedule of BrokerController: a round
// at Start, then every RegistrarConfig.Interval (RocketMQ's
// registerNameServerPeriod, 30 s, bounded to [10 s, 60 s] by the daemon's
// flag) and at once after Update (a role change: broker id 0 on a master,
// the broker's own id otherwise); a round calls every name server
// concurrently, each call bounded by Timeout (6 s, dial included) on a
// connection kept between rounds and dialled again after a failure. Close
// ends the rounds and sends UNREGISTER_BROKER to each (3 s). A failure is
// a Warn log naming the name server and a count, never fatal:
//
//	replicator_remoting_namesrv_registrations_total{outcome}    counter, ok | error
//	replicator_remoting_namesrv_unregistrations_total{outcome}  counter, ok | error
//	replicator_remoting_namesrv_registered                      gauge, name servers whose last registration succeeded
//
// # Errors
//
// ErrFrameTooLarge, ErrMalformed (decoding), ErrInvalidCommand (a command
// that cannot be encoded: a code or version outside int16 in a ROCKETMQ
// header, an unknown language in a JSON header), ErrClosed; wrapped with
// context, checked with errors.Is. ErrNamesrv: a name server refused a
// registration or answered one that does not decode.
package remoting
