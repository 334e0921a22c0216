// Package rpcerr carries sentinel errors across a plugin's gRPC boundary.
// Each plugin kind keeps one table ([]ErrorCode) that maps its sentinels to
// a gRPC code and a reason string; ToStatus and Encode give the wire form
// (a status with an ErrorInfo detail in the "replicator.plugin" domain, or
// a code and a reason inside a stream message), FromStatus and Decode give
// back an error that errors.Is matches against the sentinel. A code alone
// decodes to the first entry with that code; Unavailable means the plugin
// process is gone (ErrPluginShutdown).
package rpcerr
