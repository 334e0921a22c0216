package childproc

import "syscall"

// sysProcAttr puts a child in its own process group (a terminal's Ctrl-C
// reaches only the parent, which stops the children in order) and kills it
// if the parent dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
