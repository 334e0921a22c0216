package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/replicatorhq/replicator/sdk/meta"
)

// HTTPSourceConfig configures NewHTTPSource.
type HTTPSourceConfig struct {
	// BaseURL is the master's HTTP root, for example
	// "http://10.0.0.1:8080"; the API is at BaseURL + "/v1/metadata".
	// REQUIRED.
	BaseURL string
	// Client makes the requests; nil means a client with a 10 s timeout.
	// Each call is also bounded by its ctx.
	Client *http.Client
	// MaxDocumentSize bounds a document body; the answer may be 1 KiB
	// longer (the embedded dataVersion). 0 means DefaultMaxDocumentSize.
	MaxDocumentSize int64
	// MaxListSize bounds the answer to GET /v1/metadata in bytes; 0 means
	// 4 MiB.
	MaxListSize int64
}

// HTTPSource is a Source that reads a master's metadata over its HTTP API.
// It is safe for concurrent use. Any answer that is not what the API
// promises (status, size, JSON) is an error wrapping ErrBadResponse, or
// ErrTooLarge for an answer over its bound; a 404 from Get is ErrNotFound.
type HTTPSource struct {
	base    *url.URL
	client  *http.Client
	maxDoc  int64
	maxList int64
}

var _ meta.Source = (*HTTPSource)(nil)

// NewHTTPSource validates cfg and returns the source. It does not connect.
func NewHTTPSource(cfg HTTPSourceConfig) (*HTTPSource, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("metadata: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.MaxDocumentSize < 0 || cfg.MaxListSize < 0 {
		return nil, errors.New("metadata: negative size bound")
	}
	if cfg.MaxDocumentSize == 0 {
		cfg.MaxDocumentSize = DefaultMaxDocumentSize
	}
	if cfg.MaxListSize == 0 {
		cfg.MaxListSize = 4 << 20
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return &HTTPSource{base: u, client: cfg.Client, maxDoc: cfg.MaxDocumentSize + 1024, maxList: cfg.MaxListSize}, nil
}

// List fetches GET /v1/metadata.
func (c *HTTPSource) List(ctx context.Context) ([]meta.Entry, error) {
	data, err := c.fetch(ctx, APIPath, c.maxList)
	if err != nil {
		return nil, err
	}
	var lr ListResponse
	if err := json.Unmarshal(data, &lr); err != nil {
		return nil, fmt.Errorf("%w: list: %v", ErrBadResponse, err)
	}
	if lr.Documents == nil {
		return nil, fmt.Errorf("%w: list: no \"documents\" member", ErrBadResponse)
	}
	seen := make(map[string]bool, len(lr.Documents))
	for _, e := range lr.Documents {
		if err := ValidateName(e.Name); err != nil {
			return nil, fmt.Errorf("%w: list: %v", ErrBadResponse, err)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("%w: list: %q twice", ErrBadResponse, e.Name)
		}
		seen[e.Name] = true
	}
	slices.SortFunc(lr.Documents, func(a, b meta.Entry) int { return strings.Compare(a.Name, b.Name) })
	return lr.Documents, nil
}

// Get fetches GET /v1/metadata/{name}.
func (c *HTTPSource) Get(ctx context.Context, name string) (meta.Document, error) {
	if err := ValidateName(name); err != nil {
		return meta.Document{}, err
	}
	data, err := c.fetch(ctx, apiPrefix+name, c.maxDoc)
	if err != nil {
		return meta.Document{}, err
	}
	v, body, err := DecodeDocument(data)
	if err != nil {
		return meta.Document{}, fmt.Errorf("%w: %s: %v", ErrBadResponse, name, err)
	}
	return meta.Document{Name: name, Version: v, Body: body}, nil
}

// fetch GETs path and returns the body of a 200 answer, reading at most
// limit bytes.
func (c *HTTPSource) fetch(ctx context.Context, path string, limit int64) ([]byte, error) {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("metadata: request %s: %w", path, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metadata: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w: GET %s: %d bytes, bound %d", meta.ErrTooLarge, path, resp.ContentLength, limit)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("metadata: GET %s: reading answer: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: GET %s: answer over the bound of %d bytes", meta.ErrTooLarge, path, limit)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return data, nil
	case resp.StatusCode == http.StatusNotFound && path != APIPath:
		return nil, fmt.Errorf("%w: GET %s", meta.ErrNotFound, path)
	default:
		var er ErrorResponse
		_ = json.Unmarshal(data, &er)
		return nil, fmt.Errorf("%w: GET %s: status %d %s", ErrBadResponse, path, resp.StatusCode, truncate(er.Error))
	}
}
