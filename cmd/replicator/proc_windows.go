package main

import "syscall"

// childSysProcAttr: no process-group handling on Windows.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
