//go:build !linux

package bench

import (
	"errors"
	"os"
)

var errNoProc = errors.New("bench: /proc is Linux only")

func fdatasync(f *os.File) error { return f.Sync() }

type memSample struct {
	hwm, rss, anon, file int64
}

func readMem(int) (memSample, error)           { return memSample{}, errNoProc }
func resetPeak(int) error                      { return errNoProc }
func childrenOf(int) []int                     { return nil }
func cpuTimes() (total, idle int64, err error) { return 0, 0, errNoProc }

func cpuTicks(int) (int64, error) { return 0, errNoProc }
