package epoch_test

import (
	"fmt"
	"os"

	"github.com/replicatorhq/replicator/core/epoch"
)

// A slave compares its epochs with the master's handshake: the old master
// of epoch 1 wrote up to 150, but the new master took over epoch 2 at 100.
func ExampleConsistentPoint() {
	local := []epoch.Entry{{Epoch: 1, StartOffset: 0}}
	master := []epoch.Entry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 100}}
	at := epoch.ConsistentPoint(epoch.WithEnd(local, 150), epoch.WithEnd(master, 300))
	fmt.Println("truncate to", at)
	// Output: truncate to 100
}

func ExampleFile() {
	dir, err := os.MkdirTemp("", "epoch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	f, err := epoch.Open(dir)
	if err != nil {
		panic(err)
	}
	for _, e := range []struct {
		epoch int32
		start int64
	}{{1, 0}, {2, 4096}} {
		if err := f.Append(e.epoch, e.start); err != nil {
			panic(err)
		}
	}
	text, err := os.ReadFile(f.Path())
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", text)
	e, _ := f.FindByOffset(5000)
	fmt.Println("offset 5000 is in epoch", e.Epoch)
	// Output:
	// "2\n1694929738\n1-0\n2-4096\n"
	// offset 5000 is in epoch 2
}
