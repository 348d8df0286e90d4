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
// The protocol, on two pipes besides the command's standard input, output
// and error (which the supervisor passes on):
//   - control, fd 3, from the handler: the byte TermRequest asks for
//     SIGTERM to the command's process group; end of file, for SIGKILL to
//     everything the command started.
//   - status, fd 4, to the handler: one line once the command has exited
//     and everything it started is gone: "exit N", "signal N", or
//     "start " and why it could not be started.
//
// It is a package of its own, importing only the standard library, so that
// its init function runs among the first of a program's: a supervisor
// exits there, before the rest of the program has initialized.
package supervise

import (
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
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
)

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
// everything it left, and reports how it ended on the status pipe.
func supervise(path string, argv []string) int {
	control := os.NewFile(controlFD, "control")
	status := os.NewFile(statusFD, "status")
	syscall.CloseOnExec(controlFD)
	syscall.CloseOnExec(statusFD)
	// The supervisor ends only when its command has, or by SIGKILL: a
	// SIGTERM to every process (systemd stopping workerd's unit) reaches
	// the command itself. Caught, not ignored, so the command still gets
	// the default disposition.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// Whatever the command starts and leaves behind (a daemon that forks
	// twice and calls setsid) becomes a child of the supervisor, not of
	// init, so that it can be found and killed.
	becomeSubreaper()

	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envName+"=") })
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setpgid: true}}
	// The supervisor's own death (it is SIGKILLed) takes the command
	// with it. init runs on the main thread, which lives as long as the
	// process, so the signal is not sent early.
	dieWithParent(attr.Sys)
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		status.WriteString("start " + (&os.PathError{Op: "fork/exec", Path: path, Err: err}).Error() + "\n")
		return 1
	}
	// The command has its own copies of standard input and output; ours
	// would keep the worker from seeing end of file on them.
	os.Stdin.Close()
	os.Stdout.Close()

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
	killAll(pid)
	switch {
	case ws.Signaled():
		status.WriteString("signal " + strconv.Itoa(int(ws.Signal())) + "\n")
	default:
		status.WriteString("exit " + strconv.Itoa(ws.ExitStatus()) + "\n")
	}
	return 0
}

// killAll kills the process group pgid, then everything else the command
// left: what left the group re-parents to the supervisor (see
// becomeSubreaper) as its parents die, and is killed in turn, until the
// supervisor has no children left. Where there is no subreaper, only the
// group is killed.
func killAll(pgid int) {
	syscall.Kill(-pgid, syscall.SIGKILL)
	pause := time.Millisecond
	for {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return
			}
			if pid <= 0 && err != syscall.EINTR {
				break
			}
		}
		for _, pid := range children() {
			syscall.Kill(-pid, syscall.SIGKILL) // a group it leads, if any
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// A child killed an instant ago is not yet a zombie; look again
		// soon, and less often the longer it takes.
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
