// Package exec is the adapter that handles jobs by running a command, so a
// queue can be served without Go code: workerd's exec handlers are built
// with it.
//
//	h, err := exec.New(exec.Config{Command: []string{"./send-email"}, PermanentExitCodes: []int{65}})
//	…
//	mux.Handle("send_email", h)
//
// It lives apart from package handlers so that what a user writes against
// does not import os/exec and syscall, and so that process groups, signals
// and pipes stay in one place. It builds on Unix only: it needs process
// groups to stop everything a command started.
//
// # What dies with the worker
//
// A worker killed with SIGKILL leaves its job's lease to expire, and the job
// then runs again elsewhere: a command left running would do the work twice
// at once. So each command runs under a supervisor, the worker's own
// program run again: a run of any program that links this package becomes
// one in an init function, before main, when the handler starts it so.
// (Packages initialized before that one, a few besides the standard
// library's, run their init functions in it too: those should do no work.)
// The supervisor holds the read end of a pipe whose write end only
// the worker has; the kernel closes it however the worker dies. Then, and
// whenever the command exits, the supervisor SIGKILLs the command's process
// group, which holds what the command starts unless that calls setsid or
// setpgid.
//
// On Linux the supervisor is also a subreaper (PR_SET_CHILD_SUBREAPER): what
// leaves the group is re-parented to it, not to init, as its parents die,
// and is killed too, so nothing the command started outlives the job or
// the worker, short of a process that asks another (a service manager,
// cron, ssh) to run something. Should the supervisor itself be killed with
// SIGKILL, the command gets SIGKILL too, though what it started does not.
// Elsewhere, what leaves the group outlives the job.
//
// The supervisor is found as /proc/self/exe on Linux (which still names the
// program a deploy has replaced), os.Executable elsewhere. A plugin or a
// c-shared build of this package cannot supervise (its executable is
// another program, run with the supervisor's arguments): do not use it
// there.
package exec
