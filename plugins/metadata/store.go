package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/sdk/meta"
)

const (
	tmpSuffix   = ".tmp"
	bakSuffix   = ".bak"
	journalName = ".apply.journal"
)

// ConfigDir returns DATA/config for a data directory: where RocketMQ keeps
// its metadata files, and what Open expects.
func ConfigDir(dataDir string) string { return filepath.Join(dataDir, "config") }

// Options configure a Store.
type Options struct {
	// Clock stamps new versions. Nil means SystemClock().
	Clock Clock
	// Logger; nil means no logging.
	Logger hclog.Logger
	// MaxDocumentSize bounds a body given to Put or Apply, in bytes.
	// 0 means DefaultMaxDocumentSize.
	MaxDocumentSize int64
	// CreateDefaults creates the DefaultDocuments that are missing, with
	// their empty RocketMQ bodies, on Open. A master sets it.
	CreateDefaults bool
	// MaxDocuments bounds the number of documents; a Put or Apply that
	// would pass it fails with ErrLimit. 0 means DefaultMaxDocuments.
	// Documents already on disk at Open are loaded even when they are more.
	MaxDocuments int
	// MaxTotalSize bounds the sum of the document bodies in bytes; a Put
	// or Apply that would pass it fails with ErrLimit. 0 means
	// DefaultMaxTotalSize.
	MaxTotalSize int64
	// Registerer receives the store's metrics
	// (replicator_metadata_documents, replicator_metadata_stored_bytes,
	// replicator_metadata_refused_writes_total); nil registers none.
	Registerer prometheus.Registerer
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	return Options{Clock: SystemClock(), Logger: hclog.NewNullLogger(), MaxDocumentSize: DefaultMaxDocumentSize,
		MaxDocuments: DefaultMaxDocuments, MaxTotalSize: DefaultMaxTotalSize}
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.MaxDocumentSize < 0 {
		return fmt.Errorf("metadata: MaxDocumentSize %d is negative", o.MaxDocumentSize)
	}
	if o.MaxDocuments < 0 || o.MaxTotalSize < 0 {
		return fmt.Errorf("metadata: MaxDocuments %d or MaxTotalSize %d is negative", o.MaxDocuments, o.MaxTotalSize)
	}
	return nil
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	if o.MaxDocumentSize == 0 {
		o.MaxDocumentSize = d.MaxDocumentSize
	}
	if o.MaxDocuments == 0 {
		o.MaxDocuments = d.MaxDocuments
	}
	if o.MaxTotalSize == 0 {
		o.MaxTotalSize = d.MaxTotalSize
	}
	return o
}

// Store is the file-backed metadata store: a Source and a Sink over the
// JSON files of one directory, plus Put for the master's writes. See the
// package doc for the file format and the write protocol.
type Store struct {
	dir  string
	opts Options
	log  hclog.Logger

	mu     sync.Mutex
	docs   map[string]*stored
	total  int64 // sum of len(body) of docs
	closed bool

	refused *prometheus.CounterVec // refused writes by reason: documents, total_size
	met     *storeMetrics          // nil without a Registerer
	broken  error                  // a failed commit left disk and memory apart; Open again

	// crashHook, set by tests only, is called at each step of a write; when
	// it returns true the write stops right there, as if the process died.
	crashHook func(step string) bool
}

type stored struct {
	version meta.DataVersion
	body    json.RawMessage
	// fromBak: the main file was unreadable and this came from NAME.bak,
	// which must therefore not be overwritten by the unreadable main file.
	fromBak bool
}

var (
	_ meta.Store   = (*Store)(nil)
	_ meta.Deleter = (*Store)(nil)
)

var errCrash = errors.New("metadata: simulated crash")

// Open loads the documents in dir (DATA/config; created if missing),
// finishing or discarding any write a crash interrupted. A document whose
// file and backup are both unreadable fails Open with ErrInvalidDocument.
func Open(dir string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Store{dir: dir, opts: opts, log: opts.Logger.Named("metadata"), docs: make(map[string]*stored)}
	if err := s.registerMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("metadata: create %s: %w", dir, err)
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if opts.CreateDefaults {
		var missing []meta.Document
		for name, body := range DefaultDocuments {
			if _, ok := s.docs[name]; !ok {
				missing = append(missing, meta.Document{Name: name, Version: meta.DataVersion{Timestamp: opts.Clock.Now().UnixMilli()}, Body: json.RawMessage(body)})
			}
		}
		sort.Slice(missing, func(i, j int) bool { return missing[i].Name < missing[j].Name })
		if len(missing) > 0 {
			s.mu.Lock()
			err := s.writeLocked(missing)
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
	}
	if s.met != nil {
		s.met.add(s)
	}
	return s, nil
}

// Dir returns the directory the store keeps its files in.
func (s *Store) Dir() string { return s.dir }

// recover rolls a complete apply journal forward and removes stray
// temporary files.
func (s *Store) recover() error {
	jpath := filepath.Join(s.dir, journalName)
	data, err := os.ReadFile(jpath)
	switch {
	case err == nil:
		var j journal
		if jerr := json.Unmarshal(data, &j); jerr != nil {
			s.log.Warn("discarding unreadable apply journal", "path", jpath, "error", jerr)
		} else {
			for _, name := range j.Names {
				if ValidateName(name) != nil {
					continue
				}
				if err := s.rollForward(name); err != nil {
					return err
				}
			}
			s.log.Info("finished an interrupted apply", "documents", len(j.Names))
		}
		if err := s.syncDir(); err != nil {
			return err
		}
		if err := os.Remove(jpath); err != nil {
			return fmt.Errorf("metadata: remove journal: %w", err)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return fmt.Errorf("metadata: read journal: %w", err)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("metadata: read %s: %w", s.dir, err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), tmpSuffix) {
			if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil {
				return fmt.Errorf("metadata: remove stray %s: %w", e.Name(), err)
			}
		}
	}
	return s.syncDir()
}

// rollForward completes the commit of name from a journal: NAME.tmp, when
// present and decodable, replaces NAME, and a readable NAME becomes NAME.bak.
func (s *Store) rollForward(name string) error {
	tmp := s.path(name) + tmpSuffix
	data, err := os.ReadFile(tmp)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // already renamed into place
		}
		return fmt.Errorf("metadata: roll forward %s: %w", name, err)
	}
	if _, _, err := DecodeDocument(data); err != nil {
		s.log.Warn("discarding undecodable temporary file", "name", name, "error", err)
		return nil
	}
	mainOK := false
	if cur, err := os.ReadFile(s.path(name)); err == nil {
		_, _, derr := DecodeDocument(cur)
		mainOK = derr == nil
	}
	return s.commitOne(name, mainOK)
}

// load reads every document file, falling back to NAME.bak.
func (s *Store) load() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("metadata: read %s: %w", s.dir, err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		if b, ok := strings.CutSuffix(n, bakSuffix); ok {
			n = b // a backup whose main file is missing still counts
		}
		if ValidateName(n) == nil {
			names[n] = true
		}
	}
	for n := range names {
		main, merr := s.readDoc(s.path(n))
		if merr == nil {
			s.docs[n] = main
			s.total += int64(len(main.body))
			continue
		}
		bak, berr := s.readDoc(s.path(n) + bakSuffix)
		if berr != nil {
			if errors.Is(merr, fs.ErrNotExist) && errors.Is(berr, fs.ErrNotExist) {
				continue
			}
			if errors.Is(berr, fs.ErrNotExist) && !looksLikeObject(s.path(n)) {
				// Not a document at all (RocketMQ keeps binary files such
				// as timercheck in the same directory): not served.
				s.log.Warn("ignoring a file that is not a JSON document", "name", n)
				continue
			}
			return fmt.Errorf("metadata: load %s: %w; backup: %w", n, merr, berr)
		}
		bak.fromBak = true
		if !errors.Is(merr, fs.ErrNotExist) {
			s.log.Warn("document file unreadable, using its backup", "name", n, "error", merr)
		}
		s.docs[n] = bak
		s.total += int64(len(bak.body))
	}
	if len(s.docs) > s.opts.MaxDocuments || s.total > s.opts.MaxTotalSize {
		s.log.Warn("the documents on disk are over the store limits; writes that add documents or bytes are refused until some are deleted",
			"documents", len(s.docs), "max_documents", s.opts.MaxDocuments, "bytes", s.total, "max_total_size", s.opts.MaxTotalSize)
	}
	return nil
}

// looksLikeObject reports whether the file's first non-blank byte is '{':
// an unreadable file that does is a damaged document, not a stranger.
func looksLikeObject(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

func (s *Store) readDoc(path string) (*stored, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	v, body, err := DecodeDocument(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, filepath.Base(path))
	}
	return &stored{version: v, body: body}, nil
}

func (s *Store) path(name string) string { return filepath.Join(s.dir, name) }

func (s *Store) usable() error {
	if s.closed {
		return meta.ErrClosed
	}
	if s.broken != nil {
		return fmt.Errorf("metadata: store unusable after a failed write, reopen it: %w", s.broken)
	}
	return nil
}

// List returns every document's name and version, sorted by name.
func (s *Store) List(ctx context.Context) ([]meta.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	out := make([]meta.Entry, 0, len(s.docs))
	for n, d := range s.docs {
		out = append(out, meta.Entry{Name: n, Version: d.version})
	}
	slices.SortFunc(out, func(a, b meta.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Get returns a copy of one document, or ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (meta.Document, error) {
	if err := ctx.Err(); err != nil {
		return meta.Document{}, err
	}
	if err := ValidateName(name); err != nil {
		return meta.Document{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return meta.Document{}, err
	}
	d, ok := s.docs[name]
	if !ok {
		return meta.Document{}, fmt.Errorf("%w: %q", meta.ErrNotFound, name)
	}
	return meta.Document{Name: name, Version: d.version, Body: slices.Clone(d.body)}, nil
}

// Put stores body (a JSON object; a "dataVersion" member is dropped) as the
// document name and bumps its version (Next of the previous version, or of
// the zero version for a new document). It returns the stored document.
// Errors: ErrInvalidName, ErrInvalidDocument, ErrTooLarge (nothing changed),
// ErrClosed, or an I/O error.
func (s *Store) Put(ctx context.Context, name string, body json.RawMessage) (meta.Document, error) {
	if err := ctx.Err(); err != nil {
		return meta.Document{}, err
	}
	if err := ValidateName(name); err != nil {
		return meta.Document{}, err
	}
	if int64(len(body)) > s.opts.MaxDocumentSize {
		return meta.Document{}, fmt.Errorf("%w: %d bytes, limit %d", meta.ErrTooLarge, len(body), s.opts.MaxDocumentSize)
	}
	if !json.Valid(body) {
		return meta.Document{}, fmt.Errorf("%w: not valid JSON", meta.ErrInvalidDocument)
	}
	_, canon, err := DecodeDocument(body)
	if err != nil {
		return meta.Document{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return meta.Document{}, err
	}
	var prev meta.DataVersion
	if d, ok := s.docs[name]; ok {
		prev = d.version
	}
	if err := s.checkLimitsLocked([]meta.Document{{Name: name, Body: canon}}, nil); err != nil {
		return meta.Document{}, err
	}
	doc := meta.Document{Name: name, Version: prev.Next(s.opts.Clock.Now()), Body: canon}
	if err := s.writeLocked([]meta.Document{doc}); err != nil {
		return meta.Document{}, err
	}
	doc.Body = slices.Clone(canon)
	return doc, nil
}

// Apply implements Sink: docs are stored with their versions, atomically.
func (s *Store) Apply(ctx context.Context, docs []meta.Document) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(docs) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(docs))
	canon := make([]meta.Document, len(docs))
	for i, d := range docs {
		if err := ValidateName(d.Name); err != nil {
			return err
		}
		if seen[d.Name] {
			return fmt.Errorf("%w: %q appears twice in one apply", meta.ErrInvalidDocument, d.Name)
		}
		seen[d.Name] = true
		if int64(len(d.Body)) > s.opts.MaxDocumentSize {
			return fmt.Errorf("%w: %q is %d bytes, limit %d", meta.ErrTooLarge, d.Name, len(d.Body), s.opts.MaxDocumentSize)
		}
		_, body, err := DecodeDocument(d.Body)
		if err != nil {
			return fmt.Errorf("%q: %w", d.Name, err)
		}
		canon[i] = meta.Document{Name: d.Name, Version: d.Version, Body: body}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.checkLimitsLocked(canon, nil); err != nil {
		return err
	}
	return s.writeLocked(canon)
}

// checkLimitsLocked reports, wrapping ErrLimit, whether writing docs after
// removing the names in gone would take the store over MaxDocuments or
// MaxTotalSize. A write that adds neither documents nor bytes always
// passes, so a store loaded over its limits can still shrink. s.mu is held.
func (s *Store) checkLimitsLocked(docs []meta.Document, gone []string) error {
	count, total := len(s.docs), s.total
	for _, n := range gone {
		if d, ok := s.docs[n]; ok {
			count--
			total -= int64(len(d.body))
		}
	}
	added := 0
	for _, d := range docs {
		if old, ok := s.docs[d.Name]; ok && !slices.Contains(gone, d.Name) {
			total -= int64(len(old.body))
		} else {
			count++
			added++
		}
		total += int64(len(d.Body))
	}
	switch {
	case added > 0 && count > s.opts.MaxDocuments:
		s.refusedInc("documents")
		return fmt.Errorf("%w: %d documents, the limit is %d (delete some first)", ErrLimit, count, s.opts.MaxDocuments)
	case total > s.opts.MaxTotalSize && total > s.total:
		s.refusedInc("total_size")
		return fmt.Errorf("%w: the documents would hold %d bytes, the limit is %d", ErrLimit, total, s.opts.MaxTotalSize)
	}
	return nil
}

func (s *Store) refusedInc(reason string) {
	if s.refused != nil {
		s.refused.WithLabelValues(reason).Inc()
	}
}

// Delete removes the document name (its file and its backup) durably, or
// fails with ErrNotFound. The backup goes first: a crash in between leaves
// the document whole, never resurrected from an older backup. A default
// document deleted on a master is created again, empty, at the next Open.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	d, ok := s.docs[name]
	if !ok {
		return fmt.Errorf("%w: %q", meta.ErrNotFound, name)
	}
	p := s.path(name)
	for _, f := range []string{p + bakSuffix, p} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			if f == p {
				// The backup is gone and the document is not: memory
				// still matches the main file.
				_ = s.syncDir()
			}
			return fmt.Errorf("metadata: delete %s: %w", name, err)
		}
		if s.crash("removed " + filepath.Base(f)) {
			return errCrash
		}
	}
	if err := s.syncDir(); err != nil {
		s.broken = err
		return err
	}
	delete(s.docs, name)
	s.total -= int64(len(d.body))
	return nil
}

// Close makes further calls fail with ErrClosed. It is idempotent. All
// writes are durable when they return, so Close has nothing to flush.
func (s *Store) Close() error {
	if s.met != nil {
		s.met.remove(s) // before s.mu: Collect takes m.mu, then s.mu
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

type journal struct {
	Names []string `json:"names"`
}

// writeLocked writes docs (already validated and canonical) durably and
// atomically, then updates memory. s.mu is held.
func (s *Store) writeLocked(docs []meta.Document) error {
	// Phase 1: every NAME.tmp written and fsynced. A failure here removes
	// them again and changes nothing.
	for i, d := range docs {
		if err := writeFileSync(s.path(d.Name)+tmpSuffix, EncodeDocument(d.Version, d.Body)); err != nil {
			for _, w := range docs[:i+1] {
				_ = os.Remove(s.path(w.Name) + tmpSuffix)
			}
			return fmt.Errorf("metadata: write %s: %w", d.Name, err)
		}
	}
	if s.crash("prepared") {
		return errCrash
	}
	// Phase 2: for several documents, a journal makes the renames below
	// all-or-nothing across a crash (Open rolls it forward).
	jpath := filepath.Join(s.dir, journalName)
	if len(docs) > 1 {
		j := journal{}
		for _, d := range docs {
			j.Names = append(j.Names, d.Name)
		}
		data, _ := json.Marshal(j) // cannot fail: a list of strings
		err := writeFileSync(jpath+tmpSuffix, data)
		if err == nil {
			err = os.Rename(jpath+tmpSuffix, jpath)
		}
		if err == nil {
			err = s.syncDir()
		}
		if err != nil {
			_ = os.Remove(jpath + tmpSuffix)
			_ = os.Remove(jpath)
			for _, w := range docs {
				_ = os.Remove(s.path(w.Name) + tmpSuffix)
			}
			return fmt.Errorf("metadata: write apply journal: %w", err)
		}
		if s.crash("journaled") {
			return errCrash
		}
	}
	// Phase 3: renames. A failure here leaves disk and memory apart: the
	// store refuses further calls until it is opened again (which
	// recovers).
	for _, d := range docs {
		prev, had := s.docs[d.Name]
		mainOK := had && !prev.fromBak
		if err := s.commitOne(d.Name, mainOK); err != nil {
			s.broken = err
			return err
		}
		if s.crash("renamed " + d.Name) {
			return errCrash
		}
	}
	if err := s.syncDir(); err != nil {
		s.broken = err
		return err
	}
	if len(docs) > 1 {
		if err := os.Remove(jpath); err != nil {
			s.broken = fmt.Errorf("metadata: remove journal: %w", err)
			return s.broken
		}
		if err := s.syncDir(); err != nil {
			s.broken = err
			return err
		}
	}
	for _, d := range docs {
		if old, ok := s.docs[d.Name]; ok {
			s.total -= int64(len(old.body))
		}
		s.docs[d.Name] = &stored{version: d.Version, body: slices.Clone(d.Body)}
		s.total += int64(len(d.Body))
	}
	return nil
}

// commitOne moves a readable NAME to NAME.bak and NAME.tmp to NAME. The
// caller fsyncs the directory.
func (s *Store) commitOne(name string, mainOK bool) error {
	p := s.path(name)
	if mainOK {
		if err := os.Rename(p, p+bakSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("metadata: back up %s: %w", name, err)
		}
		if s.crash("backed up " + name) {
			return errCrash
		}
	}
	if err := os.Rename(p+tmpSuffix, p); err != nil {
		return fmt.Errorf("metadata: commit %s: %w", name, err)
	}
	return nil
}

func (s *Store) crash(step string) bool { return s.crashHook != nil && s.crashHook(step) }

func (s *Store) syncDir() error {
	f, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("metadata: open dir for fsync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("metadata: fsync %s: %w", s.dir, err)
	}
	return nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
