package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
)

// Files a RocketMQ broker keeps in its store root next to commitlog/
// (StorePathConfigHelper): replicator writes abort as a broker does and
// never writes RocketMQ's checkpoint (see doc.go, "RocketMQ's files").
const (
	abortName       = "abort"      // present while a store is open; left by a crash
	brokerCkptName  = "checkpoint" // StoreCheckpoint: consume-queue and index timestamps
	abortMarkString = "replicator commitlog\n"
)

// abortMark is what replicator writes into the abort file it creates;
// RocketMQ creates an empty one (File.createNewFile). A broker tests only
// whether the file exists, so the content tells whose it is.
var abortMark = []byte(abortMarkString)

// errBrokerRan says that a RocketMQ broker used the directory after
// replicator's last checkpoint: the checkpoint no longer describes the
// segment files.
var errBrokerRan = errors.New("commitlog: a RocketMQ broker used the directory after this checkpoint")

// brokerRanSince reports why the checkpoint at ckptPath predates a
// RocketMQ broker's use of the directory, or "" when nothing says so:
// the broker's checkpoint file, which it rewrites while it runs and at
// shutdown, or an abort file a broker created (at its start) is newer
// than ckptPath. Replicator writes neither file, so either is a broker's.
func brokerRanSince(fsys vfs.FS, root, ckptPath string) string {
	ours, err := fsys.Stat(ckptPath)
	if err != nil {
		return ""
	}
	if fi, err := fsys.Stat(filepath.Join(root, brokerCkptName)); err == nil && fi.ModTime().After(ours.ModTime()) {
		return "the broker's checkpoint file is newer"
	}
	path := filepath.Join(root, abortName)
	if fi, err := fsys.Stat(path); err == nil && fi.ModTime().After(ours.ModTime()) {
		if b, err := vfs.ReadFile(fsys, path); err == nil && !bytes.Equal(b, abortMark) {
			return "a broker's abort file is newer"
		}
	}
	return ""
}

// markOpen creates DATA/abort as a RocketMQ broker does at start, so that
// a broker opening the directory after a crash of this process recovers
// it as abnormally shut down. An abort file that is already there stays:
// replicator's own (a crash; recovery just ran) is deleted by the next
// clean Close; a broker's (empty) is kept at Close too, so that the
// broker still recovers its consume queues and index, which replicator
// does not touch.
func (l *Log) markOpen() error {
	path := filepath.Join(l.root, abortName)
	b, err := vfs.ReadFile(l.fs, path)
	switch {
	case err == nil:
		if !bytes.Equal(b, abortMark) {
			l.keepAbort = true
			l.log.Info("a RocketMQ broker's abort file is present; keeping it for the broker's recovery", "file", path)
		}
		return nil
	case !isNotExist(err):
		return fmt.Errorf("commitlog: open: %w", err)
	}
	if err := vfs.WriteFileSync(l.fs, path, abortMark, os.O_EXCL, 0o644); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			l.fs.Remove(path)
		}
		return fmt.Errorf("commitlog: open: creating %s: %w", path, err)
	}
	return syncDir(l.fs, l.root)
}

// markClosed deletes replicator's abort file after a clean Close.
func (l *Log) markClosed() error {
	if l.keepAbort {
		return nil
	}
	if err := l.fs.Remove(filepath.Join(l.root, abortName)); err != nil && !isNotExist(err) {
		return fmt.Errorf("commitlog: close: %w", err)
	}
	return syncDir(l.fs, l.root)
}
