package transport_test

import (
	"bytes"
	"fmt"

	"github.com/replicatorhq/replicator/transport"
)

// A master sends a data frame and a heartbeat; a slave parses them and
// reports its new max offset.
func Example() {
	var toSlave, toMaster bytes.Buffer

	fw := transport.NewFrameWriter(&toSlave)
	fw.WriteFrame(4096, []byte("commit-log bytes")) // data frame
	fw.WriteFrame(4096+16, nil)                     // heartbeat: [next offset][0]

	fr := transport.NewFrameReader(&toSlave, transport.DefaultBatchSize)
	rw := transport.NewReportWriter(&toMaster)
	for {
		f, err := fr.Next()
		if err != nil {
			fmt.Println("end:", err)
			break
		}
		if f.IsHeartbeat() {
			fmt.Println("heartbeat, master's next offset", f.Offset)
			continue
		}
		fmt.Printf("frame at %d: %q\n", f.Offset, f.Body)
		rw.WriteReport(f.End())
	}

	fmt.Printf("report bytes: % x\n", toMaster.Bytes())
	ack, _ := transport.NewReportReader(&toMaster).Next()
	fmt.Println("master sees ack", ack)
	// Output:
	// frame at 4096: "commit-log bytes"
	// heartbeat, master's next offset 4112
	// end: EOF
	// report bytes: 00 00 00 00 00 00 10 10
	// master sees ack 4112
}
