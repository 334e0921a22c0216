package commitlog

import (
	"fmt"
	"path/filepath"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
)

// allocDirName is the allocation directory under DATA: segment files are
// created and preallocated there and renamed into DATA/commitlog once
// whole, so that DATA/commitlog holds only full-length segment files at
// every moment (a RocketMQ 4.9 broker refuses to load a directory with
// any other file in it, and a crash in the middle of a creation leaves
// its partial file here, where Open removes it).
const allocDirName = "commitlog.alloc"

// setupAllocDir creates the allocation directory and removes what a
// crash left in it. When it is on another file system than DATA/commitlog
// (DATA/commitlog a mount point or a symlink to another disk), a rename
// cannot move a file between them: segments are then created in place,
// under their final names, as RocketMQ does (recovery removes a
// zero-filled segment at the end of the log) and no spare is prepared in
// the background: a spare under its final name would race with a roll
// that cannot wait for it.
func (l *Log) setupAllocDir() error {
	dir := filepath.Join(l.root, allocDirName)
	if err := l.fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("commitlog: open: allocation directory: %w", err)
	}
	ents, err := l.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("commitlog: open: allocation directory: %w", err)
	}
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		l.log.Info("removing an unused preallocated segment", "file", path)
		if err := l.fs.Remove(path); err != nil {
			return fmt.Errorf("commitlog: open: allocation directory: %w", err)
		}
	}
	same, err := sameFileSystem(l.fs, dir, l.dir)
	if err != nil {
		return fmt.Errorf("commitlog: open: %w", err)
	}
	if !same {
		l.log.Warn("the allocation directory is on another file system than the segments; creating segments in place, without preallocation",
			"alloc_dir", dir, "dir", l.dir)
		l.fs.Remove(dir)
		l.allocDir = l.dir
		return nil
	}
	l.allocDir = dir
	return nil
}

// sameFileSystem reports whether two directories are on one file system,
// where a rename between them is possible and atomic. A file system that
// does not say (no device number: see device) is taken as one.
func sameFileSystem(fsys vfs.FS, a, b string) (bool, error) {
	fa, err := fsys.Stat(a)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", a, err)
	}
	fb, err := fsys.Stat(b)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", b, err)
	}
	da, oka := device(fa)
	db, okb := device(fb)
	return !oka || !okb || da == db, nil
}

// inPlace reports whether segments are created under their final names
// (no usable allocation directory).
func (l *Log) inPlace() bool { return l.allocDir == l.dir }

// spareSuffix names a spare in the allocation directory, apart from a
// segment that a roll creates there itself meanwhile.
const spareSuffix = ".spare"

// newSegment creates the segment starting at start in the allocation
// directory (with spareSuffix for a spare), at full length and mapped;
// it is not part of the log or of DATA/commitlog until install.
func (l *Log) newSegment(start int64, spare bool) (*segment, error) {
	path := segmentPath(l.allocDir, start)
	if spare {
		path += spareSuffix
	}
	if !l.inPlace() {
		l.fs.Remove(path) // a leftover of an earlier attempt
	}
	return createSegment(l.fs, path, start, l.opts.SegmentSize, l.log, l.now())
}

// install renames a whole segment from the allocation directory into
// DATA/commitlog under its final name (mu held, or before the log is
// shared). The directory is fsynced by the next flush (dirDirty), before
// the flushed offset covers any byte of the segment.
func (l *Log) install(seg *segment) error {
	final := segmentPath(l.dir, seg.start)
	if seg.path != final {
		if err := l.fs.Rename(seg.path, final); err != nil {
			return fmt.Errorf("commitlog: install segment %s: %w", final, err)
		}
		seg.path = final
	}
	l.dirDirty.Store(true)
	return nil
}

// dropSpare unmaps and removes a segment that never joined the log.
func (l *Log) dropSpare(sp *segment) {
	path := sp.path
	sp.Release()
	l.fs.Remove(path)
}

// removeAllocDir removes the (empty) allocation directory at Close, so
// that a closed data directory holds only the log's own files.
func (l *Log) removeAllocDir() {
	if l.inPlace() || l.allocDir == "" {
		return
	}
	if err := l.fs.Remove(l.allocDir); err != nil && !isNotExist(err) {
		l.log.Debug("removing the allocation directory", "dir", l.allocDir, "error", err)
	}
}
