//go:build !linux

package pluginhost

import "os/exec"

// setParentDeathSignal is Linux only; elsewhere the SDK's watchdog exits a
// plugin whose parent process changed.
func setParentDeathSignal(*exec.Cmd) {}
