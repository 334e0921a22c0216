// Package client is the Go producer of a replicator node: it stores
// messages on the master through the node's producer stream, a gRPC
// bidirectional stream served on the node's API port (--listen) next to the
// JSON HTTP API, with the same TLS, bearer token and connection limits.
//
//	p, err := client.Dial(ctx, []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080"},
//		client.WithToken(token))
//	res, err := p.Send(ctx, &client.Message{Topic: "TopicTest", Body: body})
//	f := p.SendAsync(&client.Message{Topic: "TopicTest", Body: body}) // many in flight
//	res, err = f.Result()
//	err = p.Close() // waits for every result
//
// # Batching and back-pressure
//
// Every Send and SendAsync joins a queue; one writer per producer sends
// the queue in batches (PutRequest) of at most WithMaxBatch bytes and
// messages: whatever queued while the previous batch was written leaves
// together, and WithLinger makes a batch wait for more. The node stores the
// messages of a stream concurrently, so the sync puts of a batch share one
// replication wait (group commit), and answers each message by its
// sequence number. The bytes of messages queued or sent without a result
// are bounded (WithMaxInflightBytes): past the bound Send and SendAsync
// block. The node bounds its side too: it stops reading a stream whose
// unanswered messages pass 32 MiB, and HTTP/2 flow control holds the
// producer.
//
// # Order
//
// Messages in flight together are stored concurrently, in any order (as
// RocketMQ's asynchronous sends): to store messages in an order, send each
// after the previous one's result, with Send.
//
// # Results and errors
//
// A stored message has a Result: the RocketMQ put status (PUT_OK,
// FLUSH_SLAVE_TIMEOUT, ... all mean stored on the master), its commit-log
// offset, next offset and queue offset, the node that stored it, and, from
// an autoswitch or controller-mode master, the master epoch the put was
// stored and acknowledged in (Epoch) and that master's broker id
// (BrokerID): the "epoch" and "broker_id" of the JSON API's answer. A
// message that is not stored has a *PutError that matches, with
// errors.Is, either ErrNotStored (certainly not stored: sending it again is
// safe) or ErrMayBeStored (it reached a node, or may have, and no answer
// came: sending it again may store it twice), and one kind: ErrTooLarge, ErrInvalidMessage, ErrNoMaster,
// ErrUnavailable, ErrFenced (stored on a master that was demoted while it
// waited for its slaves: it may be cut), ErrNoSpace, ErrUnauthenticated,
// ErrProtocol, ErrInternal, ErrClosed, or the caller's context error.
//
// # Retries and the master
//
// The producer sends a message again only when it is certainly not stored:
// the stream could not open (connection refused: the next address is
// tried, with a pause from 10 ms to 1 s once every address failed), a slave
// or a master demoted or fenced before storing it answered (the producer
// goes to the master the node names in master_api, as the JSON API's 403
// does, else to the next address), a node knew no master to take it (a
// controller-mode group during an election: ERROR_UNAVAILABLE, the JSON
// API's 503 "stored":"no"; the next address, with the same pause), or the
// node was shutting down. The master a node names is added to the
// addresses, so that a producer dialed with one node follows the master
// across failovers; redirects that go round every address without a node
// storing a message (two nodes naming each other during a role change)
// take the pause too. It retries for WithRetryTimeout (30 s) at most, or
// until the Send's context ends. A message sent on a stream that then
// broke (a node restart, a reset connection, a node that stopped answering
// keepalive pings for 15 s) is never sent again: its error says it may be
// stored.
//
// # Idle streams
//
// A stream that sent no batch for WithIdleTimeout (30 s), or for half the
// node's idle timeout when that is shorter (the node sends it in the
// stream's headers; 2 minutes by default), is closed by the producer: it
// half-closes the stream, the node answers what it took and ends the
// stream cleanly, and the next message opens a new one. The node's own
// idle close would otherwise race a batch sent at that moment, whose
// messages could then only be reported "may be stored".
//
// # Wire
//
// The stream is replicator.producer.v1.Producer/Put (sdk/proto/producerv1):
// HTTP/2 with prior knowledge on a plain port; over TLS the producer offers
// ALPN "replicator-grpc" (producerv1.ALPNProtocol) first, which a node
// serves on gRPC's own HTTP/2 transport, then "h2", which an older node
// serves through its HTTP server (the stream works either way; the first
// costs the node less CPU per message). The token is in the
// "authorization" metadata. Each PutRequest holds messages with a
// growing sequence number (from 1 per stream); each PutResponse holds
// results in completion order, each tagged by its message's sequence.
// The producer encodes its batches and decodes the results itself
// (internal/producerwire: the protobuf encoding of producer.proto, written
// and read without reflection, on buffers that are not zeroed for reuse);
// a node or a peer using the generated code sees the same bytes. A Send
// that finds its stream idle (no batch unanswered, the previous batch a
// lone message) sends its message from its own goroutine; otherwise one
// writer goroutine per stream gathers the queued messages into the next
// batch.
package client
