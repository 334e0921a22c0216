package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/sdk/store"
)

// Roles of POST /v1/role.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// MaxRoleBody bounds the body of POST /v1/role.
const MaxRoleBody = 4 << 10

// RoleRequest is the body of POST /v1/role.
type RoleRequest struct {
	// Role is RoleMaster (promote) or RoleSlave (demote).
	Role string `json:"role"`
	// Master is the new master's HA address (host:port); only with
	// RoleSlave, and required there.
	Master string `json:"master,omitempty"`
	// MasterAPI is the new master's HTTP API base URL (http:// or
	// https://), for the node's extensions (the metadata syncer) and a
	// slave's 403 answers; only with RoleSlave, optional ("": metadata is
	// not synchronised). ParseRoleRequest normalises it like the slave's
	// --master-api.
	MasterAPI string `json:"master_api,omitempty"`
	// Epoch is the epoch a promoted node takes; 0 means its last epoch + 1.
	// Only with RoleMaster.
	Epoch int32 `json:"epoch,omitempty"`
}

// Errors a RoleChanger returns; POST /v1/role answers 409 for both.
var (
	// ErrRoleUnsupported: the node runs the classic HA protocol, which has
	// no safe runtime role change.
	ErrRoleUnsupported = errors.New("role changes need --ha-protocol autoswitch")
	// ErrRoleRefused: the change is refused (the node already has that
	// role, the epoch is older than the node's last one, ...).
	ErrRoleRefused = errors.New("role change refused")
)

// RoleChanger changes a node's role at runtime. ChangeRole returns once
// the change took effect (a demoted master refuses puts and has started
// following req.Master; a promoted slave serves puts).
type RoleChanger interface {
	ChangeRole(ctx context.Context, req RoleRequest) error
}

// ParseRoleRequest decodes and checks the body of POST /v1/role.
func ParseRoleRequest(body []byte) (RoleRequest, error) {
	var req RoleRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("invalid JSON body: %w (want {\"role\":\"master\"} or {\"role\":\"slave\",\"master\":\"HOST:PORT\"})", err)
	}
	if dec.More() {
		return req, errors.New("invalid JSON body: more than one value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, errors.New("invalid JSON body: data after the object")
	}
	switch req.Role {
	case RoleMaster:
		if req.Master != "" {
			return req, errors.New(`"master" is only for {"role":"slave"}`)
		}
		if req.MasterAPI != "" {
			return req, errors.New(`"master_api" is only for {"role":"slave"}`)
		}
		if req.Epoch < 0 {
			return req, fmt.Errorf("invalid epoch %d (want 1 or more, or 0 for the last epoch + 1)", req.Epoch)
		}
	case RoleSlave:
		if req.Epoch != 0 {
			return req, errors.New(`"epoch" is only for {"role":"master"}`)
		}
		if err := checkHAAddr(req.Master); err != nil {
			return req, err
		}
		if req.MasterAPI != "" {
			u, err := config.NormalizeURL(req.MasterAPI)
			if err != nil {
				return req, fmt.Errorf(`"master_api": %w`, err)
			}
			req.MasterAPI = u
		}
	case "":
		return req, errors.New(`missing "role" (want "master" or "slave")`)
	default:
		return req, fmt.Errorf("invalid role %q (want \"master\" or \"slave\")", req.Role)
	}
	return req, nil
}

// checkHAAddr checks a master's HA address: host:port with a port of 1 to
// 65535 and a host.
func checkHAAddr(s string) error {
	if s == "" {
		return errors.New(`{"role":"slave"} needs "master": the new master's HA address (HOST:PORT)`)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("invalid master address %q: %v (want HOST:PORT)", s, err)
	}
	if host == "" {
		return fmt.Errorf("invalid master address %q: no host", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("invalid master address %q: port %q (want 1 to 65535)", s, port)
	}
	return nil
}

// role serves POST /v1/role.
func (s *Server) role(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		WriteError(w, http.StatusBadRequest, "role takes no query parameters")
		return
	}
	if r.ContentLength > MaxRoleBody {
		WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is larger than the limit of %d bytes", r.ContentLength, MaxRoleBody))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRoleBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than the limit of %d bytes", MaxRoleBody))
			return
		}
		WriteError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	req, err := ParseRoleRequest(body)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.Roles == nil {
		WriteError(w, http.StatusConflict, "this node runs the classic HA protocol: "+ErrRoleUnsupported.Error())
		return
	}
	err = s.cfg.Roles.ChangeRole(r.Context(), req)
	switch {
	case err == nil:
		s.log.Info("role changed through the API", "role", req.Role, "master", req.Master, "master_api", req.MasterAPI, "remote", r.RemoteAddr)
		WriteJSON(w, http.StatusOK, s.statusAnswer())
	case errors.Is(err, ErrRoleUnsupported), errors.Is(err, ErrRoleRefused):
		WriteError(w, http.StatusConflict, err.Error())
	case errors.Is(err, core.ErrClosed), errors.Is(err, store.ErrClosed):
		WriteError(w, http.StatusServiceUnavailable, "the node is shutting down")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		WriteError(w, http.StatusServiceUnavailable, "request cancelled: "+err.Error())
	default:
		s.log.Error("role change failed", "role", req.Role, "master", req.Master, "error", err)
		WriteError(w, http.StatusInternalServerError, "role change failed: "+err.Error())
	}
}

// fencedPutError is the answer of a put that failed with core.ErrFenced:
// res.NextOffset > 0 means the message was appended before the fence (it
// was waiting for its slaves).
func fencedPutError(res core.PutResult) string {
	if res.NextOffset > 0 {
		return fmt.Sprintf("this master was demoted while the put waited for its slaves: the message is stored on this node at offset %d but may be cut when it rejoins as a slave; send it again to the new master", res.Offset)
	}
	return "this master is fenced or being demoted: the message was not stored; send it to the new master"
}
