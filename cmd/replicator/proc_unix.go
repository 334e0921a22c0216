//go:build !linux && !windows

package main

import "syscall"

// childSysProcAttr puts a demo node in its own process group, so that a
// terminal's Ctrl-C reaches only the demo, which stops the nodes in order.
func childSysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
