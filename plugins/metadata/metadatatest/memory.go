// Package metadatatest holds the in-memory twin of the metadata plugin's
// store and the conformance suite every LocalStore (Source + Sink)
// implementation should pass: metadatatest.TestLocalStore(t, open).
package metadatatest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// Memory is an in-memory metadata.LocalStore with Put, for tests of code
// that uses a Source or a Sink (a syncer without disk or HTTP). It follows
// the same contract as metadata.Store, minus durability. Safe for
// concurrent use.
type Memory struct {
	mu   sync.Mutex
	now  func() time.Time
	docs map[string]meta.Document
	// FailApply, when set, is returned by Apply (nothing applied).
	FailApply error
	// Applies counts successful Apply calls with at least one document.
	Applies int
}

var (
	_ metadata.LocalStore    = (*Memory)(nil)
	_ metadata.DocumentStore = (*Memory)(nil)
	_ meta.Deleter           = (*Memory)(nil)
)

// NewMemory returns an empty store; now stamps versions in Put (nil means
// time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, docs: map[string]meta.Document{}}
}

// List implements meta.Source.
func (m *Memory) List(ctx context.Context) ([]meta.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]meta.Entry, 0, len(m.docs))
	for _, d := range m.docs {
		out = append(out, meta.Entry{Name: d.Name, Version: d.Version})
	}
	slices.SortFunc(out, func(a, b meta.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Get implements meta.Source.
func (m *Memory) Get(ctx context.Context, name string) (meta.Document, error) {
	if err := ctx.Err(); err != nil {
		return meta.Document{}, err
	}
	if err := metadata.ValidateName(name); err != nil {
		return meta.Document{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.docs[name]
	if !ok {
		return meta.Document{}, fmt.Errorf("%w: %q", meta.ErrNotFound, name)
	}
	d.Body = slices.Clone(d.Body)
	return d, nil
}

// Put stores body under name with the next version, as metadata.Store.Put.
func (m *Memory) Put(ctx context.Context, name string, body json.RawMessage) (meta.Document, error) {
	if err := ctx.Err(); err != nil {
		return meta.Document{}, err
	}
	if err := metadata.ValidateName(name); err != nil {
		return meta.Document{}, err
	}
	if !json.Valid(body) {
		return meta.Document{}, fmt.Errorf("%w: not valid JSON", meta.ErrInvalidDocument)
	}
	_, canon, err := metadata.DecodeDocument(body)
	if err != nil {
		return meta.Document{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := meta.Document{Name: name, Version: m.docs[name].Version.Next(m.now()), Body: canon}
	m.docs[name] = d
	d.Body = slices.Clone(canon)
	return d, nil
}

// Apply implements meta.Sink.
func (m *Memory) Apply(ctx context.Context, docs []meta.Document) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	staged := make([]meta.Document, 0, len(docs))
	seen := map[string]bool{}
	for _, d := range docs {
		if err := metadata.ValidateName(d.Name); err != nil {
			return err
		}
		if seen[d.Name] {
			return fmt.Errorf("%w: %q appears twice in one apply", meta.ErrInvalidDocument, d.Name)
		}
		seen[d.Name] = true
		_, body, err := metadata.DecodeDocument(d.Body)
		if err != nil {
			return fmt.Errorf("%q: %w", d.Name, err)
		}
		staged = append(staged, meta.Document{Name: d.Name, Version: d.Version, Body: body})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.FailApply != nil {
		return m.FailApply
	}
	for _, d := range staged {
		m.docs[d.Name] = d
	}
	if len(staged) > 0 {
		m.Applies++
	}
	return nil
}

// Delete implements meta.Deleter.
func (m *Memory) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := metadata.ValidateName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.docs[name]; !ok {
		return fmt.Errorf("%w: %q", meta.ErrNotFound, name)
	}
	delete(m.docs, name)
	return nil
}
