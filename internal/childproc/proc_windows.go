package childproc

import "syscall"

// sysProcAttr: no process-group handling on Windows.
func sysProcAttr() *syscall.SysProcAttr { return nil }
