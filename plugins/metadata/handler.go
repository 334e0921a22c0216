package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/sdk/meta"
)

// DocumentStore is what the HTTP handler serves: a Source plus the master's
// write. *Store implements it.
type DocumentStore interface {
	meta.Source
	// Put stores body as the document name and bumps its version; see
	// (*Store).Put.
	Put(ctx context.Context, name string, body json.RawMessage) (meta.Document, error)
}

var _ DocumentStore = (*Store)(nil)

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Store serves the documents. REQUIRED.
	Store DocumentStore
	// ReadOnly answers PUT with 403 (slaves).
	ReadOnly bool
	// MaxDocumentSize bounds a PUT body in bytes; 0 means
	// DefaultMaxDocumentSize.
	MaxDocumentSize int64
	// Logger; nil means no logging.
	Logger hclog.Logger
}

// API paths.
const (
	APIPath   = "/v1/metadata"
	apiPrefix = APIPath + "/"
)

// ListResponse is the body of GET /v1/metadata.
type ListResponse struct {
	Documents []meta.Entry `json:"documents"`
}

// PutResponse is the body of a successful PUT /v1/metadata/{name}.
type PutResponse struct {
	Name    string           `json:"name"`
	Version meta.DataVersion `json:"dataVersion"`
}

// DeleteResponse is the body of a successful DELETE /v1/metadata/{name}.
type DeleteResponse struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

type handler struct {
	cfg HandlerConfig
	log hclog.Logger
	mux *http.ServeMux
}

// NewHandler returns the metadata HTTP API (see the package doc). Mount it
// at "/" or at both "/v1/metadata" and "/v1/metadata/".
func NewHandler(cfg HandlerConfig) (http.Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("metadata: HandlerConfig.Store is required")
	}
	if cfg.MaxDocumentSize < 0 {
		return nil, fmt.Errorf("metadata: MaxDocumentSize %d is negative", cfg.MaxDocumentSize)
	}
	if cfg.MaxDocumentSize == 0 {
		cfg.MaxDocumentSize = DefaultMaxDocumentSize
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	h := &handler{cfg: cfg, log: cfg.Logger.Named("metadata-http"), mux: http.NewServeMux()}
	h.routes(h.mux)
	return h, nil
}

// routes mounts the API on mux as Go 1.22 ServeMux patterns, one per
// method (a GET pattern takes HEAD too). The method-less patterns on the
// same paths take every other method and answer a JSON 405 with an Allow
// header (ServeMux's own 405 is plain text).
func (h *handler) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+APIPath, h.list)
	mux.HandleFunc("GET "+apiPrefix+"{name}", h.get)
	mux.HandleFunc("PUT "+apiPrefix+"{name}", h.put)
	mux.HandleFunc("DELETE "+apiPrefix+"{name}", h.delete)
	mux.Handle(APIPath, notAllowed(http.MethodGet))
	mux.Handle(apiPrefix+"{name}", notAllowed(http.MethodGet, http.MethodPut, http.MethodDelete))
}

// notAllowed answers 405 with an Allow header listing allow and a JSON
// message.
func notAllowed(allow ...string) http.HandlerFunc {
	list := strings.Join(allow, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", list)
		writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("metadata: method %s not allowed (use %s)", r.Method, list))
	}
}

// ServeHTTP checks the document name in the raw path first, so that every
// bad name gets a clear 400 with nothing touched (ServeMux would otherwise
// redirect "." and ".." segments, or answer 404 for a name with a '/'),
// then routes with the ServeMux patterns.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), apiPrefix); ok {
		name, err := url.PathUnescape(rest)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("%w: bad escape in path", meta.ErrInvalidName))
			return
		}
		if err := ValidateName(name); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ents, err := h.cfg.Store.List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ListResponse{Documents: ents})
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateName(name); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	doc, err := h.cfg.Store.Get(r.Context(), name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(EncodeDocument(doc.Version, doc.Body))
}

// writable returns the document name of a put or delete, or false once it
// answered: 400 for an invalid name, 403 on a read-only node (a slave;
// then says what to do instead).
func (h *handler) writable(w http.ResponseWriter, r *http.Request, then string) (string, bool) {
	name := r.PathValue("name")
	if err := ValidateName(name); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return "", false
	}
	if h.cfg.ReadOnly {
		writeError(w, http.StatusForbidden, errors.New("metadata: read-only (this node is a slave); "+then))
		return "", false
	}
	return name, true
}

func (h *handler) put(w http.ResponseWriter, r *http.Request) {
	name, ok := h.writable(w, r, "write to the master")
	if !ok {
		return
	}
	if r.ContentLength > h.cfg.MaxDocumentSize {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: %d bytes, limit %d", meta.ErrTooLarge, r.ContentLength, h.cfg.MaxDocumentSize))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxDocumentSize))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: over the limit of %d bytes", meta.ErrTooLarge, h.cfg.MaxDocumentSize))
			return
		}
		writeError(w, http.StatusBadRequest, fmt.Errorf("metadata: reading request body: %w", err))
		return
	}
	doc, err := h.cfg.Store.Put(r.Context(), name, body)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.Debug("document stored", "name", name, "counter", doc.Version.Counter, "bytes", len(body))
	writeJSON(w, http.StatusOK, PutResponse{Name: doc.Name, Version: doc.Version})
}

// delete removes a document (master only).
func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	name, ok := h.writable(w, r, "delete on the master")
	if !ok {
		return
	}
	d, ok := h.cfg.Store.(meta.Deleter)
	if !ok {
		writeError(w, http.StatusNotImplemented, errors.New("metadata: this node's metadata store plugin cannot delete documents"))
		return
	}
	if err := d.Delete(r.Context(), name); err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.Info("document deleted", "name", name, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, DeleteResponse{Name: name, Deleted: true})
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrLimit):
		writeError(w, http.StatusInsufficientStorage, err)
	case errors.Is(err, meta.ErrInvalidName), errors.Is(err, meta.ErrInvalidDocument):
		writeError(w, http.StatusBadRequest, err)
	case errors.Is(err, meta.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err)
	case errors.Is(err, meta.ErrNotFound):
		writeError(w, http.StatusNotFound, err)
	case errors.Is(err, meta.ErrClosed), errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, err)
	default:
		h.log.Error("metadata request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		writeError(w, http.StatusInternalServerError, err)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"error":"metadata: encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, ErrorResponse{Error: err.Error()})
}
