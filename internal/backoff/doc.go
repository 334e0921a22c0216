// Package backoff is the retry delay of the accept loops (the HA master's,
// the TLS listener's, the remoting server's, the transport plugin
// server's): after a transient Accept failure (file descriptors
// exhausted, ...) a loop waits and keeps serving, as net/http's Server
// does. The delay starts at Min, doubles at each failure in a row up to
// Max, and starts again at Min after a success:
//
//	var b backoff.Backoff
//	for {
//		c, err := ln.Accept()
//		if err != nil {
//			if backoff.Stopped(err, done) { // shutting down, or the listener closed
//				return
//			}
//			d := b.Next()
//			log.Error("accept failed; retrying", "error", err, "backoff", d)
//			if !backoff.Sleep(d, done) {
//				return
//			}
//			continue
//		}
//		b.Reset()
//		...
//	}
//
// Sleep uses a timer, so fake time (testing/synctest) drives it.
package backoff
