//go:build !linux && !windows

package childproc

import "syscall"

// sysProcAttr puts a child in its own process group, so that a terminal's
// Ctrl-C reaches only the parent, which stops the children in order.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
