// Package transporttest is the conformance suite for transport.Transport
// implementations. Every implementation (plugins/transport-tcp,
// transport/memtransport, and any third-party transport) runs it:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) transport.Transport {
//			return tcptransport.New(tcptransport.DefaultOptions())
//		})
//	}
//
// It checks what core relies on, and nothing more: Listen on an ephemeral
// address ("127.0.0.1:0" unless ListenAddr says otherwise; Addr() returns
// the address to Dial), Dial with a ctx (a cancelled ctx fails, an address
// nobody listens on fails), a faithful byte stream in both directions at
// once (including the classic HA frames and reports of package transport),
// several connections side by side, close semantics (a peer's Close is io.EOF
// after the data written before it; a local Close fails later calls with
// net.ErrClosed and unblocks a blocked Read; closing the listener fails a
// blocked Accept with net.ErrClosed and leaves accepted connections working)
// and deadlines (a timeout is a net.Error with Timeout() true matching
// os.ErrDeadlineExceeded; a Read deadline moved while blocked takes effect;
// a Write deadline bounds a Write the peer does not drain; after a Read
// timeout the connection still works).
//
// InBubble runs every case inside a testing/synctest bubble (the transport
// must then be created inside it, which Run does), for in-memory transports
// that support fake time.
package transporttest
