//go:build !linux

package shmring

import "os"

// Supported reports whether this platform has the ring.
const Supported = false

// Create reports ErrUnsupported: the ring needs Linux's sealed memfd.
func Create(dataSize int) (*Ring, *os.File, error) { return nil, nil, ErrUnsupported }

// Attach reports ErrUnsupported.
func Attach(f *os.File) (*Ring, error) { return nil, ErrUnsupported }
