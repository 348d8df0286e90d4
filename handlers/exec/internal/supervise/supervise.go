//go:build unix

// Package supervise is the supervisor each exec command runs under: the
// worker's program run again, started by the exec handler, which starts
// the command and answers how it ended. It is there to outlive the
// worker. Pdeathsig, the kernel's own "die with your parent", reaches only
// the direct child, so a worker killed with SIGKILL would leave whatever
// its command started running, re-parented to init, while the job's lease
// expires and another worker runs the job again. The supervisor holds the
// read end of a pipe whose only write end is the worker's; the kernel
// closes that end however the worker dies, and the supervisor then kills
// everything the command started.
//
// The protocol, on five pipes, the supervisor's fds 3 to 7 (its own
// standard input, output and error are /dev/null, so that nothing an init
// function or the Go runtime of the supervisor writes there reaches the
// command's output):
//   - control, fd 3, from the handler: the byte TermRequest asks for
//     SIGTERM to the command's process group; end of file, for SIGKILL to
//     everything the command started. Already at end of file (or holding
//     TermRequest) when the supervisor is ready to start the command, it
//     does not start it.
//   - status, fd 4, to the handler: one line once the command has exited
//     and everything it started is gone: "exit N", "signal N", or
//     "start " and why it was not started; then, if some of what the
//     command left could not be killed, "left " and which, and why.
//   - the command's standard input, output and error, fds 5, 6 and 7,
//     which become its fds 0, 1 and 2.
//
// It is a package of its own, importing only packages that package os
// needs anyway (and strconv), so that its init function runs among the
// first of a program's: a supervisor exits there, before the rest of the
// program has initialized. Go initializes packages one at a time, each
// once those it imports are, taking the first ready one in the order of
// import paths; what is ready before this package and sorts before it
// still initializes first (package handlers/exec's doc says what that
// means for a user's program).
package supervise

import (
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	// Arg0 and EnvEntry, in the environment, together make a run of the
	// program a supervisor: the environment variable alone, inherited by
	// chance, must not turn a worker into one. The supervisor's argv is
	// Arg0, the command's path, and the command's argv.
	Arg0     = "fenceq-exec-supervisor"
	EnvEntry = envName + "=1"
	// TermRequest, on the control pipe, asks for SIGTERM to the command's
	// process group.
	TermRequest = 't'

	envName   = "FENCEQ_EXEC_SUPERVISOR"
	controlFD = 3
	statusFD  = 4
	stdinFD   = 5 // then the command's standard output and error
)

// killLimit bounds how long the supervisor tries to kill what the command
// left before it gives up and reports it: a process it may not signal
// (EPERM: one that a setuid program such as sudo started) would otherwise
// keep it, and the job, waiting for ever.
var killLimit = 5 * time.Second

// kill is syscall.Kill; a test makes it fail.
var kill = syscall.Kill

// init turns this run of the program into a supervisor, before main, when
// the handler started it as one; otherwise it does nothing. It is an init
// function so that every program that links this package, workerd or a
// user's own, can supervise its commands without calling anything from
// main.
func init() {
	if len(os.Args) < 3 || os.Args[0] != Arg0 || envName+"="+os.Getenv(envName) != EnvEntry {
		return
	}
	os.Exit(supervise(os.Args[1], os.Args[2:]))
}

// supervise starts the command path with argv, waits for it, kills
// everything it left, and reports how it ended on the status pipe. It
// answers 0, the supervisor's exit code, once it has reported: a
// supervisor that exits otherwise said nothing.
func supervise(path string, argv []string) int {
	status := os.NewFile(statusFD, "status")
	for fd := controlFD; fd <= stdinFD+2; fd++ {
		syscall.CloseOnExec(fd)
	}
	// The supervisor ends only when its command has, or by SIGKILL: a
	// SIGTERM to every process (systemd stopping workerd's unit) reaches
	// the command itself. Caught, not ignored, so the command still gets
	// the default disposition; but one the worker was started with
	// ignored (nohup) stays ignored, for the command to inherit.
	caught := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(sig) {
			signal.Notify(caught, sig)
		}
	}
	// Whatever the command starts and leaves behind (a daemon that forks
	// twice and calls setsid) becomes a child of the supervisor, not of
	// init, so that it can be found and killed.
	becomeSubreaper()

	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return hasPrefix(kv, envName+"=") })
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{stdinFD, stdinFD + 1, stdinFD + 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	// The supervisor's own death (it is SIGKILLed) takes the command
	// with it. init runs on the main thread, which lives as long as the
	// process, so the signal is not sent early.
	dieWithParent(attr.Sys)
	// A worker that died, or gave up the job, while the supervisor was
	// starting up must not have its command started: it would run for a
	// job whose lease is about to expire, and might finish before the
	// SIGKILL. What happens to control after this look, the watcher
	// below sees, with the command's pid known.
	if why := stoppedFirst(); why != "" {
		status.WriteString("start not started: " + why + "\n")
		return 0 // it did what it was asked: report
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	// The command has its own copies of its standard input and output;
	// ours would keep the worker from seeing end of file on them.
	for fd := stdinFD; fd <= stdinFD+2; fd++ {
		syscall.Close(fd)
	}
	if err != nil {
		status.WriteString("start " + (&os.PathError{Op: "fork/exec", Path: path, Err: err}).Error() + "\n")
		return 0
	}

	control := os.NewFile(controlFD, "control") // non-blocking: see stoppedFirst
	var mu sync.Mutex
	reaped := false // once true, pid may belong to another process
	go func() {
		b := make([]byte, 1)
		for {
			n, err := control.Read(b)
			mu.Lock()
			switch {
			case reaped:
			case n == 1 && b[0] == TermRequest:
				syscall.Kill(-pid, syscall.SIGTERM)
			case err != nil:
				// The worker is gone, or wants the command dead: the
				// group now, the rest once the command has been reaped.
				syscall.Kill(-pid, syscall.SIGKILL)
				syscall.Kill(pid, syscall.SIGKILL)
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()

	// Orphans it adopted are reaped as they exit, while the command runs:
	// left as zombies, a long job's would use up process ids.
	var ws syscall.WaitStatus
	for {
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if wpid == pid || (err != nil && err != syscall.EINTR) {
			break
		}
	}
	mu.Lock()
	reaped = true
	mu.Unlock()
	left := killAll(pid, killLimit)
	switch {
	case ws.Signaled():
		status.WriteString("signal " + strconv.Itoa(int(ws.Signal())) + "\n")
	default:
		status.WriteString("exit " + strconv.Itoa(ws.ExitStatus()) + "\n")
	}
	if left != "" {
		status.WriteString("left " + left + "\n")
	}
	return 0
}

// stoppedFirst reads what the control pipe holds before the command is
// started, without waiting: why the command must not start (the worker
// is gone, or asked for it to stop), or "" when nothing has been said yet.
// It leaves the pipe non-blocking, for os.NewFile to poll.
func stoppedFirst() string {
	if err := syscall.SetNonblock(controlFD, true); err != nil {
		return "control pipe: " + err.Error()
	}
	b := make([]byte, 1)
	for {
		n, err := syscall.Read(controlFD, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return ""
		case err != nil:
			return "control pipe: " + err.Error()
		case n == 0:
			return "the worker was gone before the command could start"
		default:
			return "the job was stopped before the command could start"
		}
	}
}

// killAll kills the process group pgid, then everything else the command
// left: what left the group re-parents to the supervisor (see
// becomeSubreaper) as its parents die, and is killed in turn, until the
// supervisor has no children left. Where there is no subreaper, only the
// group is killed. It gives up after limit, and answers then which
// processes are left and why they could not be killed; "" when none are.
func killAll(pgid int, limit time.Duration) string {
	kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(limit)
	pause := time.Millisecond
	for {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return ""
			}
			if pid <= 0 && err != syscall.EINTR {
				break
			}
		}
		var left []string
		for _, pid := range children() {
			kill(-pid, syscall.SIGKILL) // a group it leads, if any
			why := "still there after SIGKILL"
			if err := kill(pid, syscall.SIGKILL); err != nil {
				why = err.Error()
			}
			left = append(left, strconv.Itoa(pid)+" ("+why+")")
		}
		if time.Now().After(deadline) {
			if len(left) == 0 {
				return "a child not listed in /proc"
			}
			joined := left[0]
			for _, l := range left[1:] {
				joined += ", " + l
			}
			return joined
		}
		// A child killed an instant ago is not yet a zombie; look again
		// soon, and less often the longer it takes.
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// hasPrefix, lastIndex and fields are those of packages strings and
// bytes, which this package does not import: they import package unicode,
// whose tables Go initializes late in a program's start-up, and every
// package that is ready before them and sorts before them would then
// initialize, in each supervisor, before its init function could run.
func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

func lastIndex(s, sep string) int {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return i
		}
	}
	return -1
}

// fields splits s around runs of ASCII spaces, tabs and newlines.
func fields(s string) []string {
	var f []string
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' || s[i] == '\t' || s[i] == '\n' {
			if start >= 0 {
				f = append(f, s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	return f
}
