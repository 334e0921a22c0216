// Package store defines the commit-log store interface that replicator's
// core replicates, its result types and its sentinel errors. The builtin
// implementation is plugins/commitlog (RocketMQ's on-disk layout on mmap'd
// segments); third-party stores implement the same interface.
package store
