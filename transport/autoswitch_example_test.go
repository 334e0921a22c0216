package transport_test

import (
	"bytes"
	"fmt"

	"github.com/replicatorhq/replicator/transport"
)

// An AutoSwitch session: the slave handshakes, the master answers with its
// epoch history and sends a transfer frame, the slave acks.
func Example_autoSwitch() {
	var toMaster, toSlave bytes.Buffer

	toMaster.Write(transport.AppendSlaveHandshake(nil, transport.SlaveHandshake{BrokerID: 2}))
	sr := transport.NewSlaveFrameReader(&toMaster)
	hs, _ := sr.Next()
	fmt.Println("master got", hs.State, "from broker", hs.Handshake.BrokerID)

	reply, _ := transport.AppendMasterHandshake(nil, transport.MasterHandshake{
		MaxOffset: 16, LastEpoch: 2,
		Epochs: []transport.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 8}},
	})
	toSlave.Write(reply)
	body := []byte("commit-log bytes")
	var hdr [transport.TransferHeaderSize]byte
	transport.PutTransferHeader(hdr[:], transport.TransferHeader{Offset: 0, Size: 8, Epoch: 1, EpochStartOffset: 0, ConfirmOffset: 16})
	toSlave.Write(hdr[:])
	toSlave.Write(body[:8]) // a frame never crosses its epoch's end (8)

	mr := transport.NewMasterFrameReader(&toSlave, transport.DefaultBatchSize)
	f, _ := mr.Next()
	fmt.Println("slave got", f.State, "max", f.Handshake.MaxOffset, "epochs", f.Handshake.Epochs)
	f, _ = mr.Next()
	fmt.Printf("slave got %v at %d epoch %d: %q\n", f.State, f.Transfer.Offset, f.Transfer.Epoch, f.Body)

	toMaster.Write(transport.AppendAck(nil, f.Transfer.End()))
	ack, _ := sr.Next()
	fmt.Println("master got ack", ack.Offset)
	// Output:
	// master got HANDSHAKE from broker 2
	// slave got HANDSHAKE max 16 epochs [{1 0} {2 8}]
	// slave got TRANSFER at 0 epoch 1: "commit-l"
	// master got ack 8
}
