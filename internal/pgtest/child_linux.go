//go:build linux

package pgtest

import (
	"os/exec"
	"syscall"
)

// DieWithTest makes the child process cmd is about to start receive SIGKILL
// when the test process that started it dies, so a test killed by its
// timeout or by hand leaves no worker holding database connections.
func DieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
