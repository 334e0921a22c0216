// Package history records what concurrent producers saw while faults were
// injected into a controller-mode group, and checks it: a Jepsen-style
// checker for an append-only log.
//
// # The history
//
// Every put is one operation (Op): the message's unique key, the
// producer (Client), the invocation and completion times (Call, Return,
// nanoseconds on one monotonic clock, Recorder.Now) and the outcome:
//
//	OK       PUT_OK: the message lies at [Offset, Next), acknowledged by
//	         BrokerID as the master of Epoch
//	Unknown  it may or may not be stored: a 200 answer other than PUT_OK
//	         (stored on the master, maybe not on its in-sync set), a 503
//	         saying the message may be cut, a timeout or a broken
//	         connection; Open marks an answer that never came (the put may
//	         still take effect after Return)
//	Failed   definitely not stored: a refused connection, a 503 saying the
//	         message was not stored, a 403 that was not followed
//
// A put that a slave answers 403 and its master then takes is one
// operation: the 403 stored nothing.
//
// # The final log
//
// After the run every node's log is read (Log: one Record per message,
// with the key parsed from its body). The nodes must hold the same
// records; the checks below run on that log.
//
// # Checks
//
// Check runs all of them and returns every Violation found:
//
//   - lost: an OK message is not in the final log at its offset (or its
//     record ends elsewhere than the answered next offset);
//   - overwritten: two OK answers name the same offset for different
//     messages (an offset held two acknowledged messages over time);
//   - split brain: two broker ids acknowledged puts in the same epoch;
//   - stale epoch: a put was acknowledged in an epoch older than that of a
//     put acknowledged before it was invoked (a deposed master still
//     acknowledging); an acknowledgement without epoch or broker id;
//   - resurrected: a Failed message is in the final log;
//   - duplicated or foreign: a key twice in the final log, or a record no
//     operation put;
//   - not linearizable: porcupine (github.com/anishathalye/porcupine)
//     finds no linearization of the operations plus the final read
//     against the model of an append-only log.
//
// # The model
//
// The sequential specification is an append-only log of byte offsets:
// append(m) puts m at the log's end and returns that offset; read returns
// the whole log. An OK append must return the end of the log at its
// linearization point; a Failed one must leave the log alone; an Unknown
// one may do either; the final read must return the log. A log never
// deletes and keys are unique, so in any linearization that ends with
// the final read, an Unknown append whose message the read does not hold
// did nothing, and one whose message it holds took effect exactly once,
// at that message's offset. The model resolves its one nondeterministic
// choice that way, which leaves porcupine a deterministic model whose
// state is one number (the records appended so far, the index in the
// final log of the next one): no state explosion. Appends that did
// nothing can be linearized at any instant without changing the state,
// so they are left out of the search; an Open put whose message lies
// before that of a put answered later ends, at the latest, when that one
// returned; and the history splits at instants when no operation is
// pending, each chunk searched from the state the chunks before it end
// in (porcupine's cost grows with the square of a chunk's length), so
// tens of thousands of operations check in seconds. What porcupine adds to the direct checks is real time: a put
// acknowledged before another was invoked must lie before it, and an
// Unknown put's message cannot lie before a message acknowledged before
// that put was invoked.
package history
