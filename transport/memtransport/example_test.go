package memtransport_test

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/memtransport"
)

// A slave reports to a master over a link that cuts every write into
// pieces of at most 3 bytes; the framing reassembles them. In a test, run
// this inside synctest.Test to make Delay and deadlines use fake time.
func Example() {
	nw := memtransport.NewNetwork(memtransport.Config{Seed: 1})
	nw.Link("slave", "mem:master").SetFaults(memtransport.Faults{SplitWrites: 3})

	ln, _ := nw.Transport("master").Listen("mem:master")
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slave, _ := nw.Transport("slave").Dial(ctx, "mem:master")
	defer slave.Close()
	master, _ := ln.Accept()

	transport.NewReportWriter(slave).WriteReport(0) // request offset 0
	req, _ := transport.NewReportReader(master).Next()
	fmt.Println("request offset", req)

	fw := transport.NewFrameWriter(master)
	fw.WriteFrame(req, []byte("hello, slave"))
	master.Close()

	fr := transport.NewFrameReader(slave, 0)
	for {
		f, err := fr.Next()
		if err == io.EOF {
			break
		}
		fmt.Printf("%d %q\n", f.Offset, f.Body)
	}
	// Output:
	// request offset 0
	// 0 "hello, slave"
}
