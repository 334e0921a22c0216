package epoch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Source says which file Open read the list from.
type Source int

const (
	// SourceNone: neither the main file nor the backup exists; the list is
	// empty.
	SourceNone Source = iota
	// SourceMain: the main file was valid.
	SourceMain
	// SourceBackup: the main file was missing or invalid and the backup
	// was valid (Recovery.MainErr says why, nil for a missing main file).
	SourceBackup
)

// String returns "none", "main" or "backup".
func (s Source) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourceMain:
		return "main"
	case SourceBackup:
		return "backup"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Recovery describes how Open loaded the list, for callers to log.
type Recovery struct {
	Source Source
	// MainErr is why the main file was not used when Source is
	// SourceBackup: an error wrapping ErrCorrupt, or nil when the main
	// file did not exist (a crash between the two renames of a write).
	MainErr error
}

// Options configures OpenWithOptions.
type Options struct {
	// Logger, when set, gets one WARN line when Open falls back to the
	// backup because the main file is corrupt. Nil: Open logs nothing
	// (read File.Recovery instead).
	Logger hclog.Logger
}

// File is the epoch file of one data directory and its list in memory. It
// is safe for concurrent use. Every change is persisted (written to
// FILE.tmp, fsynced, the main file renamed to FILE.bak, FILE.tmp renamed
// over the main file, the directory fsynced) before the method returns.
// When a write fails before the new file is in place, the list in memory is
// unchanged and the files read back as the old list; when only a later
// step fails (the directory fsync), the error is returned and the list in
// memory is the new one, as the files now read. One File per directory:
// two Files (or processes) on the same directory overwrite each other.
type File struct {
	dir      string
	path     string
	recovery Recovery

	mu      sync.RWMutex
	entries []Entry // ascending epoch, EndOffsets set, last Unbounded
	// mainValid: the main file holds a valid list (read or written by
	// this File). When it does not (corrupt or missing), a write replaces
	// it without making it the backup, which keeps the valid backup.
	mainValid bool
}

// Open loads dir/FileName: a missing file (and no backup) is an empty list;
// a missing or corrupt main file falls back to the backup, silently (see
// File.Recovery). It fails when dir is not a directory, on I/O errors
// other than a missing file, and (wrapping ErrCorrupt) when the list can be
// read from neither file.
func Open(dir string) (*File, error) {
	return OpenWithOptions(dir, Options{})
}

// OpenWithOptions is Open with options.
func OpenWithOptions(dir string, opts Options) (*File, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("epoch: open %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("epoch: open %s: not a directory", dir)
	}
	f := &File{dir: dir, path: filepath.Join(dir, FileName)}
	es, rec, err := load(f.path)
	if err != nil {
		return nil, err
	}
	f.entries, f.recovery = es, rec
	f.mainValid = rec.Source == SourceMain
	if rec.Source == SourceBackup && rec.MainErr != nil && opts.Logger != nil {
		opts.Logger.Warn("epoch file corrupt, using its backup",
			"path", f.path, "backup", f.path+BackupSuffix, "error", rec.MainErr, "entries", len(es))
	}
	return f, nil
}

// load reads the main file, falling back to the backup when the main file
// is missing or corrupt.
func load(path string) ([]Entry, Recovery, error) {
	es, mainErr := readFile(path)
	if mainErr == nil {
		return es, Recovery{Source: SourceMain}, nil
	}
	mainMissing := errors.Is(mainErr, fs.ErrNotExist)
	if !mainMissing && !errors.Is(mainErr, ErrCorrupt) {
		return nil, Recovery{}, mainErr
	}
	bak := path + BackupSuffix
	es, bakErr := readFile(bak)
	switch {
	case bakErr == nil:
		rec := Recovery{Source: SourceBackup}
		if !mainMissing {
			rec.MainErr = mainErr
		}
		return es, rec, nil
	case errors.Is(bakErr, fs.ErrNotExist) && mainMissing:
		return nil, Recovery{Source: SourceNone}, nil
	case errors.Is(bakErr, fs.ErrNotExist):
		return nil, Recovery{}, fmt.Errorf("epoch: open: %w; no backup", mainErr)
	case mainMissing:
		return nil, Recovery{}, fmt.Errorf("epoch: open: %s missing; backup %w", path, bakErr)
	default:
		return nil, Recovery{}, fmt.Errorf("epoch: open: %w; backup %w", mainErr, bakErr)
	}
}

// readFile reads and decodes one file, refusing (ErrCorrupt) a file larger
// than MaxFileSize before reading it.
func readFile(path string) ([]Entry, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("epoch: read %s: %w", path, err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("epoch: read %s: %w", path, err)
	}
	es, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return es, nil
}

// Path returns the main file's path.
func (f *File) Path() string { return f.path }

// Recovery says which file Open read the list from and why, for the
// caller's log.
func (f *File) Recovery() Recovery { return f.recovery }

// Entries returns a copy of the list, ascending epoch, the last EndOffset
// Unbounded.
func (f *File) Entries() []Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]Entry(nil), f.entries...)
}

// Last returns the entry of the highest epoch.
func (f *File) Last() (Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.entries) == 0 {
		return Entry{}, false
	}
	return f.entries[len(f.entries)-1], true
}

// Len returns the number of entries.
func (f *File) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.entries)
}

// Append adds {epoch, startOffset} as the new last entry and persists the
// list. The rule is RocketMQ's appendEntry with one difference:
//
//   - the list is empty: accepted;
//   - epoch <= last epoch, or startOffset < last start: refused with
//     ErrNotNewer (RocketMQ's rule);
//   - startOffset == last start and epoch > last epoch (the last epoch's
//     master wrote nothing): the new entry replaces the last one.
//     RocketMQ refuses it, which leaves a master promoted twice without
//     writing on the older epoch; the replaced entry covers no byte, so
//     no offset, truncation or consistent point can depend on it;
//   - startOffset > last start: appended; the old last entry ends at
//     startOffset.
//
// A negative epoch or start offset is refused with ErrInvalid.
func (f *File) Append(epoch int32, startOffset int64) error {
	if epoch < 0 || startOffset < 0 {
		return fmt.Errorf("epoch: append %d-%d: %w", epoch, startOffset, ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	next, err := appendEntry(f.entries, epoch, startOffset)
	if err != nil {
		return err
	}
	return f.replace(next)
}

// appendEntry returns a new list with the entry appended per Append's rule.
func appendEntry(es []Entry, epoch int32, startOffset int64) ([]Entry, error) {
	out := make([]Entry, len(es), len(es)+1)
	copy(out, es)
	if n := len(out); n > 0 {
		last := out[n-1]
		switch {
		case epoch <= last.Epoch:
			return nil, fmt.Errorf("epoch: append %d-%d after %d-%d: epoch: %w", epoch, startOffset, last.Epoch, last.StartOffset, ErrNotNewer)
		case startOffset < last.StartOffset:
			return nil, fmt.Errorf("epoch: append %d-%d after %d-%d: start offset: %w", epoch, startOffset, last.Epoch, last.StartOffset, ErrNotNewer)
		case startOffset == last.StartOffset:
			out = out[:n-1]
		}
	}
	out = append(out, Entry{Epoch: epoch, StartOffset: startOffset})
	setEnds(out, Unbounded)
	return out, nil
}

// FindByOffset returns the entry with StartOffset <= off < EndOffset.
func (f *File) FindByOffset(off int64) (Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return findByOffset(f.entries, off)
}

func findByOffset(es []Entry, off int64) (Entry, bool) {
	// The first entry starting after off; the one before it is the only
	// candidate (an empty entry before it has EndOffset == StartOffset).
	i := sort.Search(len(es), func(i int) bool { return es[i].StartOffset > off })
	if i == 0 {
		return Entry{}, false
	}
	e := es[i-1]
	if off < e.EndOffset {
		return e, true
	}
	return Entry{}, false
}

// Get returns the entry of epoch.
func (f *File) Get(epoch int32) (Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].Epoch >= epoch })
	if i < len(f.entries) && f.entries[i].Epoch == epoch {
		return f.entries[i], true
	}
	return Entry{}, false
}

// Next returns the entry of the smallest epoch greater than epoch
// (RocketMQ's nextEntry).
func (f *File) Next(epoch int32) (Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].Epoch > epoch })
	if i < len(f.entries) {
		return f.entries[i], true
	}
	return Entry{}, false
}

// TruncateSuffixByEpoch drops the entries with Epoch >= epoch; the new last
// entry becomes Unbounded. The list is persisted when it changed.
func (f *File) TruncateSuffixByEpoch(epoch int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].Epoch >= epoch })
	return f.truncateSuffix(keep)
}

// TruncateSuffixByOffset drops the entries with StartOffset >= off; the new
// last entry becomes Unbounded. The list is persisted when it changed.
func (f *File) TruncateSuffixByOffset(off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].StartOffset >= off })
	return f.truncateSuffix(keep)
}

// truncateSuffix keeps the first keep entries. The caller holds mu.
func (f *File) truncateSuffix(keep int) error {
	if keep == len(f.entries) {
		return nil
	}
	next := append([]Entry(nil), f.entries[:keep]...)
	setEnds(next, Unbounded)
	return f.replace(next)
}

// TruncatePrefixByOffset drops the entries with EndOffset <= off (their
// bytes are all below off: retention deleted them). The last entry is
// Unbounded and always kept. The list is persisted when it changed.
func (f *File) TruncatePrefixByOffset(off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	drop := 0
	for drop < len(f.entries) && f.entries[drop].EndOffset <= off {
		drop++
	}
	if drop == 0 {
		return nil
	}
	return f.replace(append([]Entry(nil), f.entries[drop:]...))
}

// replace persists next and makes it the list. The caller holds mu. Once
// the new file is in place the list in memory follows it, even when a
// later step (the directory fsync, the empty backup) fails and the error is
// returned: memory always matches what a reader of the files sees now.
func (f *File) replace(next []Entry) error {
	installed, err := persist(f.dir, f.path, next, f.mainValid)
	if installed {
		f.entries = next
		f.mainValid = true
	}
	return err
}

// persist writes the list so that a crash at any point leaves files that
// read back as either the old or the new list:
//
//  1. FILE.tmp gets the new text and is fsynced;
//  2. FILE is renamed to FILE.bak (the backup RocketMQ keeps; a crash here
//     leaves no FILE, and Open reads FILE.bak: the old list), unless FILE
//     is known corrupt (keepBackup false: Open read FILE.bak, which then
//     already holds the old list and stays);
//  3. FILE.tmp is renamed to FILE; the directory is fsynced.
//
// An empty list is written too ("0\n0\n") and then copied over FILE.bak
// the same way, so that no reader falls back to a non-empty backup (see
// the package documentation). installed reports whether FILE holds the
// new list (step 3 done).
func persist(dir, path string, es []Entry, keepBackup bool) (installed bool, err error) {
	text := Encode(es)
	if err := writeSynced(path+tmpSuffix, text); err != nil {
		return false, err
	}
	crashPoint(stepTmpWritten)
	if keepBackup {
		if err := os.Rename(path, path+BackupSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("epoch: keep backup: %w", err)
		}
	}
	crashPoint(stepMainMoved)
	if err := os.Rename(path+tmpSuffix, path); err != nil {
		return false, fmt.Errorf("epoch: install %s: %w", path, err)
	}
	crashPoint(stepInstalled)
	if err := syncDir(dir); err != nil {
		return true, err
	}
	if len(es) > 0 {
		return true, nil
	}
	crashPoint(stepDirSynced)
	if err := writeSynced(path+tmpSuffix, text); err != nil {
		return true, err
	}
	crashPoint(stepEmptyTmpWritten)
	if err := os.Rename(path+tmpSuffix, path+BackupSuffix); err != nil {
		return true, fmt.Errorf("epoch: empty backup: %w", err)
	}
	crashPoint(stepEmptyBackup)
	return true, syncDir(dir)
}

// The steps of persist, for the crash test.
const (
	stepTmpWritten      = iota + 1 // FILE.tmp complete and fsynced
	stepMainMoved                  // FILE renamed to FILE.bak (or kept: corrupt or missing)
	stepInstalled                  // FILE.tmp renamed to FILE
	stepDirSynced                  // empty list only: directory fsynced, backup next
	stepEmptyTmpWritten            // empty list only: FILE.tmp for the backup written
	stepEmptyBackup                // empty list only: FILE.tmp renamed to FILE.bak
	numSteps            = stepEmptyBackup
)

// crashHook is nil except in the crash test's writer process, which kills
// itself at a chosen step.
var crashHook func(step int)

func crashPoint(step int) {
	if crashHook != nil {
		crashHook(step)
	}
}

// writeSynced creates (or truncates) path with b and fsyncs it.
func writeSynced(path string, b []byte) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("epoch: write %s: %w", path, err)
	}
	if _, err := fh.Write(b); err != nil {
		fh.Close()
		return fmt.Errorf("epoch: write %s: %w", path, err)
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return fmt.Errorf("epoch: fsync %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("epoch: close %s: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory so that renames in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("epoch: fsync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("epoch: fsync dir %s: %w", dir, err)
	}
	return nil
}
