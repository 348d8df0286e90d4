//go:build unix && !linux

package supervise

import (
	"os"
	"syscall"
)

// Executable is this program, to run again as a command's supervisor.
func Executable() (string, error) { return os.Executable() }

// dieWithParent has no portable equivalent outside Linux: a command
// outlives a supervisor killed with SIGKILL there.
func dieWithParent(*syscall.SysProcAttr) {}

// becomeSubreaper has no portable equivalent outside Linux: orphans the
// command leaves outside its process group go to init there.
func becomeSubreaper() {}

// children is empty: without a subreaper the supervisor adopts no one.
func children() []int { return nil }
