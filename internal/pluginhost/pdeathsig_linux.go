package pluginhost

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel SIGKILL the plugin when the host
// dies, even by SIGKILL. (The signal follows the OS thread that started the
// plugin; Go keeps its threads unless a goroutine exits while locked to one,
// which the host never does. The SDK's parent watchdog covers the rest.)
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
