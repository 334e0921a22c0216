package errorfs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
	"github.com/replicatorhq/replicator/sdk/record"
)

// A commit log on a file system whose file creations fail with ENOSPC
// (a full disk): the Append that needs the first segment fails, and
// succeeds once the disk has room again.
func Example() {
	dir, err := os.MkdirTemp("", "errorfs-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	fsys := errorfs.Wrap(vfs.Default, nil)
	opts := commitlog.DefaultOptions()
	opts.SegmentSize, opts.Preallocate, opts.FS = 1<<20, false, fsys
	l, err := commitlog.Open(dir, opts)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	msg := &record.Message{Topic: "TopicTest", Body: []byte("hello")}

	fsys.SetInjector(errorfs.Always(syscall.ENOSPC, errorfs.Kinds(errorfs.OpCreate)))
	_, err = l.Append(context.Background(), msg)
	fmt.Println("disk full:", errors.Is(err, syscall.ENOSPC), errors.Is(err, errorfs.ErrInjected))

	fsys.SetInjector(nil)
	res, err := l.Append(context.Background(), msg)
	fmt.Println("room again:", err, res.Offset)
	// Output:
	// disk full: true true
	// room again: <nil> 0
}
