//go:build unix && !linux

package exec

import "syscall"

// dieWithParent has no portable equivalent outside Linux: a command outlives
// a worker killed with SIGKILL there.
func dieWithParent(*syscall.SysProcAttr) {}
