package exec

import "syscall"

// dieWithParent asks Linux to SIGKILL the command if the worker process dies
// (kill -9, OOM): its job's lease then expires and the job runs again
// elsewhere, so a command left running would do the work twice at once.
// (Linux ties the signal to the thread that started the child; the Go
// runtime does not end such threads while the process lives.)
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
