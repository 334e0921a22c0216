// Package internal groups the plumbing the SDK's plugin kinds share and
// that neither a plugin author nor the host programs against: the side
// channel (package side), the shared-memory append ring of the store
// kind's side channel on Linux (package shmring), the go-plugin glue of
// every kind (package pluginkind), the sentinel error <-> gRPC status
// tables (package rpcerr) and the gRPC codec and options (package grpcopt). Go's
// internal rule keeps them out of the SDK's public surface; sdk/plugin
// exports the few entry points the host needs (plugin.DialOptions,
// plugin.NewGRPCServer, plugin.ErrPluginShutdown).
package internal
