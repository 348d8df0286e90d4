package supervise

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// Executable is this program, to run again as a command's supervisor:
// /proc/self/exe still names it when a deploy has replaced the file. A
// program started through the dynamic loader, as in
// "/lib64/ld-linux-x86-64.so.2 ./workerd", has the loader for
// /proc/self/exe, which run again would not run this program: Executable
// refuses it, with an error that says to start the program directly.
func Executable() (string, error) { return executable() }

var executable = sync.OnceValues(func() (string, error) {
	target, err := os.Readlink("/proc/self/exe")
	if err == nil && isLoader(target[lastIndex(target, "/")+1:]) {
		return "", errors.New("this program was started through the dynamic loader " + target +
			", which is what /proc/self/exe would run as the supervisor of each command: start the program directly")
	}
	return "/proc/self/exe", nil
})

// isLoader tells whether name, the file /proc/self/exe links to, is a
// dynamic loader's: glibc's ld-linux*.so.* and ld64.so.*, musl's
// ld-musl-*.so.1, ld.so.
func isLoader(name string) bool {
	return hasPrefix(name, "ld-linux") || hasPrefix(name, "ld64.so") ||
		hasPrefix(name, "ld-musl-") || name == "ld.so" || hasPrefix(name, "ld.so.")
}

// dieWithParent asks Linux to SIGKILL the command if its supervisor dies.
// (Linux ties the signal to the thread that started the child; the
// supervisor starts it from its main thread, which lives as long as it.)
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// becomeSubreaper makes the supervisor the parent of every orphan among
// its descendants, in place of init (PR_SET_CHILD_SUBREAPER, Linux 3.4).
// Should it fail, the command's process group is still killed.
func becomeSubreaper() {
	const prSetChildSubreaper = 36
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// children are the supervisor's children: the orphans it adopted. It reads
// /proc/self/task/*/children, or, on a kernel without them, every
// process's parent in /proc/*/stat.
func children() []int {
	var pids []int
	found := false
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		found = true
		for _, field := range fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if found {
		return pids
	}
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	for _, proc := range procs {
		pid, err := strconv.Atoi(proc.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + proc.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := lastIndex(string(b), ") ")
		if i < 0 {
			continue
		}
		if f := fields(string(b[i+2:])); len(f) >= 2 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
