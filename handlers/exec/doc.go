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
//
// What runs in the supervisor, before it takes over, is the Go runtime's
// start-up and the init functions of the packages Go initializes before
// this package's internal one. Go initializes packages one at a time,
// each once those it imports are, taking the first ready one in the order
// of import paths; the internal package imports only what package os
// needs (and strconv), so it is ready early, and what comes first is most
// of the standard library's and any other package that is ready as early
// and whose import path sorts before
// "github.com/fenceq/fenceq/handlers/exec/internal/supervise": in practice
// one that imports little beyond os and syscall (not fmt, strings or
// reflect) and does not import this package, under a path such as
// example.com/... or a module of github.com/a.... In workerd those are a
// few that set up tables in memory; workerd's own binary has no init
// function with effects outside the process. What such an init function
// writes to its standard output or error goes nowhere: the supervisor's
// own are /dev/null, and the command gets its standard input, output and
// error on other descriptors, so nothing reaches the command or the job's
// result. Its other side effects (a file written, a connection opened)
// happen once per command. A user program whose init function has side
// effects should import this package in the package of that init function
// (a blank import, import _ "github.com/fenceq/fenceq/handlers/exec", is
// enough): Go then initializes this package first, and the supervisor
// exits before that init function runs. Nothing short of a separate
// supervisor binary avoids this, and this package has none, so that any
// program that links it works alone.
//
// The supervisor holds the read end of a pipe whose write end only the
// worker has; the kernel closes it however the worker dies. Should that
// happen while the supervisor is still starting up, it does not start the
// command (the job reports "not started"). Otherwise then, and whenever
// the command exits, the supervisor SIGKILLs the command's process group,
// which holds what the command starts unless that calls setsid or
// setpgid. Signals the worker was started ignoring (SIGHUP under nohup,
// SIGINT in a shell's background) stay ignored for the command; others
// have their default disposition.
//
// On Linux the supervisor is also a subreaper (PR_SET_CHILD_SUBREAPER): what
// leaves the group is re-parented to it, not to init, as its parents die,
// and is killed too, so nothing the command started outlives the job or
// the worker, short of a process that asks another (a service manager,
// cron, ssh) to run something. Should the supervisor itself be killed with
// SIGKILL, the command gets SIGKILL too, though what it started does not.
// Elsewhere, what leaves the group outlives the job. A leftover the
// supervisor may not signal (EPERM: a process a setuid program such as
// sudo started, under another user) cannot be killed: the supervisor
// gives up on it after 5 seconds, and the handler logs a warning naming
// the processes left (and adds them to the job's error when it failed).
//
// The supervisor is found as /proc/self/exe on Linux (which still names the
// program a deploy has replaced), os.Executable elsewhere. A plugin or a
// c-shared build of this package cannot supervise (its executable is
// another program, run with the supervisor's arguments): do not use it
// there. Nor can a program started through the dynamic loader
// ("/lib64/ld-linux-x86-64.so.2 ./workerd"), whose /proc/self/exe is the
// loader: New refuses to build a handler there, saying to start the
// program directly.
package exec
