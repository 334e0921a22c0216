package shmring

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Supported reports whether this platform has the ring.
const Supported = true

// seals are what the producer puts on the memfd and the consumer insists
// on: the file can neither shrink nor grow, so a mapping of it never
// loses pages (no SIGBUS), and no one can take the seals off.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Create makes a ring of dataSize bytes (a multiple of 8 between MinData
// and MaxData) in a new sealed memfd, mapped for the producer. The file is
// the one to send to the consumer (SCM_RIGHTS); close it once sent (the
// mapping stays).
func Create(dataSize int) (*Ring, *os.File, error) {
	if dataSize < MinData || dataSize > MaxData || dataSize%8 != 0 {
		return nil, nil, fmt.Errorf("shmring: data size %d: want a multiple of 8 in [%d, %d]", dataSize, MinData, MaxData)
	}
	fd, err := unix.MemfdCreate("replicator-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("shmring: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "replicator-ring")
	total := HeaderSize + dataSize
	if err := unix.Ftruncate(fd, int64(total)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("shmring: ftruncate: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("shmring: seal: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("shmring: mmap: %w", err)
	}
	return newProducer(mem, func() error { return unix.Munmap(mem) }), f, nil
}

// Attach maps the ring in f (the consumer's end; f came from the producer
// over a unix socket) and checks it: sealed against shrinking and growing,
// a size within bounds, a header that matches it. f can be closed
// afterwards.
func Attach(f *os.File) (*Ring, error) {
	fd := int(f.Fd())
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: seals: %w", ErrCorrupt, err)
	}
	if got&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return nil, fmt.Errorf("%w: the ring's file is not sealed against resizing (seals %#x)", ErrCorrupt, got)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shmring: fstat: %w", err)
	}
	if st.Size < HeaderSize+MinData || st.Size > HeaderSize+MaxData {
		return nil, fmt.Errorf("%w: ring file of %d bytes", ErrCorrupt, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmring: mmap: %w", err)
	}
	r, err := attach(mem, func() error { return unix.Munmap(mem) })
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return r, nil
}
