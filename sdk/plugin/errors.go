package plugin

import "github.com/replicatorhq/replicator/sdk/internal/rpcerr"

// The sentinel <-> gRPC status tables live in sdk/internal/rpcerr. These
// names forward to it for the kind packages that still import them from
// here (sdk/metaplugin); new code uses rpcerr directly.

// ErrorCode maps one sentinel error to a gRPC code and a reason string.
type ErrorCode = rpcerr.ErrorCode

// ToStatus converts err into a gRPC status error (rpcerr.ToStatus).
func ToStatus(table []ErrorCode, err error) error { return rpcerr.ToStatus(table, err) }

// FromStatus converts a gRPC error back into a sentinel-carrying error
// (rpcerr.FromStatus).
func FromStatus(table []ErrorCode, err error) error { return rpcerr.FromStatus(table, err) }
