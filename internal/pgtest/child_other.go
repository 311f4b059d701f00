//go:build !linux

package pgtest

import "os/exec"

// DieWithTest does nothing where the kernel cannot tie a child's life to
// its parent's; the tests stop their children themselves.
func DieWithTest(cmd *exec.Cmd) {}
