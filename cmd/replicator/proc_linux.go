package main

import "syscall"

// childSysProcAttr puts a demo node in its own process group (a terminal's
// Ctrl-C reaches only the demo, which stops the nodes in order) and kills it
// if the demo dies without cleaning up.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
