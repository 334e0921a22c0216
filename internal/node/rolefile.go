package node

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// RoleFileName is the role history file in the data directory.
const RoleFileName = "role"

// RoleFileFormat is the format version a role file carries.
const RoleFileFormat = 1

// MaxRoleFileBytes bounds the role file read at start.
const MaxRoleFileBytes = 4 << 10

// Roles a role file records.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// ErrRoleFile: the role file is unreadable (not JSON, unknown format,
// invalid fields).
var ErrRoleFile = errors.New("node: invalid role file")

// ErrDivergedRejoin: a classic slave was asked to start on a data directory
// whose last role was master.
var ErrDivergedRejoin = errors.New("node: the data directory last ran as a master")

// RoleRecord is the content of DATA/role: the last role this data
// directory ran as, with the protocol, the epoch (autoswitch) and the
// broker id.
type RoleRecord struct {
	Format   int    `json:"format"`
	Role     string `json:"role"`     // RoleMaster or RoleSlave
	Protocol string `json:"protocol"` // "classic" or "autoswitch"
	// Epoch is the last epoch of the epoch file when the role was taken
	// (autoswitch; 0 in classic mode or with no epoch yet).
	Epoch int32 `json:"epoch"`
	// BrokerID is the node's broker id (chosen at the first start unless
	// given with --broker-id).
	BrokerID int64     `json:"broker_id"`
	Time     time.Time `json:"time"`
}

// MaxGeneratedBrokerID bounds a broker id chosen at random (1 to this).
const MaxGeneratedBrokerID = 999_999

// NewBrokerID returns a random broker id in [1, MaxGeneratedBrokerID].
func NewBrokerID() (int64, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(MaxGeneratedBrokerID))
	if err != nil {
		return 0, fmt.Errorf("node: choosing a broker id: %w", err)
	}
	return n.Int64() + 1, nil
}

// ReadRoleFile reads DATA/role; ok is false when there is none.
func ReadRoleFile(dir string) (rec RoleRecord, ok bool, err error) {
	path := filepath.Join(dir, RoleFileName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("node: reading the role file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRoleFileBytes+1))
	if err != nil {
		return rec, false, fmt.Errorf("node: reading %s: %w", path, err)
	}
	if len(b) > MaxRoleFileBytes {
		return rec, false, fmt.Errorf("%w: %s is larger than %d bytes", ErrRoleFile, path, MaxRoleFileBytes)
	}
	rec, err = DecodeRoleRecord(b)
	if err != nil {
		return rec, false, fmt.Errorf("%s: %w", path, err)
	}
	return rec, true, nil
}

// DecodeRoleRecord parses and checks a role file's content.
func DecodeRoleRecord(b []byte) (RoleRecord, error) {
	var rec RoleRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("%w: %v", ErrRoleFile, err)
	}
	if dec.More() {
		return rec, fmt.Errorf("%w: data after the object", ErrRoleFile)
	}
	switch {
	case rec.Format != RoleFileFormat:
		return rec, fmt.Errorf("%w: format %d (this version reads %d)", ErrRoleFile, rec.Format, RoleFileFormat)
	case rec.Role != RoleMaster && rec.Role != RoleSlave:
		return rec, fmt.Errorf("%w: role %q", ErrRoleFile, rec.Role)
	case rec.Protocol != "classic" && rec.Protocol != "autoswitch":
		return rec, fmt.Errorf("%w: protocol %q", ErrRoleFile, rec.Protocol)
	case rec.Epoch < 0:
		return rec, fmt.Errorf("%w: epoch %d", ErrRoleFile, rec.Epoch)
	case rec.BrokerID < 0:
		return rec, fmt.Errorf("%w: broker id %d", ErrRoleFile, rec.BrokerID)
	}
	return rec, nil
}

// EncodeRoleRecord is the file content of rec: one JSON object and a
// newline.
func EncodeRoleRecord(rec RoleRecord) []byte {
	rec.Format = RoleFileFormat
	rec.Time = rec.Time.UTC().Truncate(time.Millisecond)
	b, _ := json.Marshal(rec) // a struct of plain fields: cannot fail
	return append(b, '\n')
}

// WriteRoleFile replaces DATA/role with rec atomically and durably: a
// temporary file written and fsynced, renamed over the old one, and the
// directory fsynced, so that a crash leaves the old or the new content.
func WriteRoleFile(dir string, rec RoleRecord) error {
	path := filepath.Join(dir, RoleFileName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("node: writing the role file: %w", err)
	}
	_, werr := f.Write(EncodeRoleRecord(rec))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("node: writing %s: %w", tmp, werr)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("node: replacing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("node: syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("node: syncing %s: %w", dir, err)
	}
	return nil
}

// DivergedRejoinMessage says why a classic slave refuses an ex-master's
// data directory and what to do.
func DivergedRejoinMessage(dir string, rec RoleRecord) string {
	return fmt.Sprintf("the data directory %s last ran as a %s master (at %s): a classic slave cannot detect that its log diverged from the new master's "+
		"(messages the old master took that the new master never received would stay, and the new master's bytes would be appended after them). "+
		"Re-seed it (stop, remove the directory, start the slave), or start it with --ha-protocol autoswitch on both sides, which truncates the log to the last point consistent with the master's, "+
		"or start it with --allow-diverged-rejoin if you know the logs agree",
		dir, rec.Protocol, rec.Time.Format(time.RFC3339))
}
