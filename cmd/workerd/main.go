// Command workerd runs fenceq workers and administers fenceq queues.
//
//	workerd dev                              an embedded Redis, demo workers and jobs
//	workerd run --config workerd.yaml        the production runner
//	workerd enqueue QUEUE KIND [flags]       enqueue a job (or --jsonl FILE for many)
//	workerd inspect [QUEUE | job QUEUE ID]   queues, limits, leases (and who holds them), one job
//	workerd workers [--json]                 the live worker pools: host, pid, queues, running jobs
//	workerd jobs QUEUE --state STATE         list a queue's jobs in one state
//	workerd groups QUEUE                     a queue's job groups and their limits
//	workerd release QUEUE ID                 force-release a running job
//	workerd retry QUEUE ID | --dead          send dead jobs back
//	workerd cancel QUEUE ID                  cancel a job
//	workerd delete QUEUE ID [--state S]      delete a job no worker holds
//	workerd purge QUEUE --state S [--yes]    delete every done, dead or cancelled job
//	workerd promote QUEUE ID                 run a scheduled job (or retry) now
//	workerd pause QUEUE                      stop claiming from a queue
//	workerd resume QUEUE                     claim from a paused queue again
//	workerd limit QUEUE [flags]              set or show a queue's and its groups' limits
//	workerd events QUEUE --keep N | --off    record a queue's lifecycle events
//	workerd check [QUEUE]                    verify that no job is lost or misfiled
//	workerd schedules [--json]               list periodic jobs: source, spec, next and last run
//	workerd schedule add|set|pause|resume|rm NAME [flags]   manage a periodic job stored in Redis
//	workerd bench [flags]                    measure throughput on a real Redis
//	workerd ui [--redis URL] [--ui-token T]  serve the web dashboard alone
//	workerd api --api-token T [--redis URL]  serve the HTTP API (/v1/) alone
//	workerd version                          the fenceq version (also --version)
//
// Every command of commands() is listed here, in 'workerd --help' and in
// the README's command table; TestEveryCommandIsListed holds them to it.
//
// Exit codes: 0 success, 1 a failure the command reports (an inconsistency
// found by check, a job or queue that does not exist), 2 a usage or
// configuration error (bad flag, bad config file, Redis unreachable or too
// old). A usage error prints one line saying what was wrong and a hint,
// both on standard error; --help prints on standard output.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// env is what a command may touch of the outside world, so that tests can
// run commands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// hurry is closed by a second interrupt: stop without waiting for
	// running jobs. A nil one (in tests) never closes.
	hurry <-chan struct{}
}

type command struct {
	name, summary string
	run           func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"dev", "run an embedded Redis with demo workers and jobs (no setup)", runDev},
		{"run", "run workers from a config file (the production runner)", runRun},
		{"enqueue", "enqueue a job, or many from a JSON-lines file", runEnqueue},
		{"inspect", "show queues, a queue's leases and who holds them, or one job", runInspect},
		{"jobs", "list a queue's jobs in one state, e.g. the dead ones", runJobs},
		{"workers", "list the live worker pools: host, pid, version, queues, running jobs", runWorkers},
		{"groups", "list a queue's job groups: running, ready and limits, largest backlogs first", runGroups},
		{"release", "force-release a running job (it runs again elsewhere)", runRelease},
		{"retry", "send a dead or cancelled job, or all dead jobs, back to run", runRetry},
		{"cancel", "cancel a job", runCancel},
		{"delete", "delete a job no worker holds (finished, pending, scheduled or blocked)", runDelete},
		{"purge", "delete every done, dead or cancelled job of a queue, in bounded steps", runPurge},
		{"promote", "run a scheduled job, or a retry in backoff, now", runPromote},
		{"pause", "stop claiming from a queue (enqueues still accepted)", runPause},
		{"resume", "resume a paused queue", runResume},
		{"limit", "set or show a queue's rate and concurrency limits, and its groups' (shared by every worker)", runLimit},
		{"events", "record (or stop recording) a queue's lifecycle events", runEvents},
		{"check", "verify that every job is in the index of its state", runCheck},
		{"schedules", "list the periodic jobs, stored in Redis or in the pools' configs, with their next and last runs", runSchedules},
		{"schedule", "add, change, pause, resume or remove a periodic job stored in Redis (every pool picks it up, no restart)", runSchedule},
		{"bench", "measure throughput, round trips and latency on a real Redis", runBench},
		{"ui", "serve the web dashboard (read-only without --ui-token)", runUI},
		{"api", "serve the HTTP API under /v1/ for producers in any language (needs --api-token)", runAPI},
		{"version", "print the version of fenceq this workerd is built from", runVersion},
	}
}

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// configError is a bad configuration or an unusable Redis: exit code 2.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// onePrefix is an error's message without the library's own "fenceq: "
// prefixes: workerd's "workerd COMMAND: " is the only one an error gets.
func onePrefix(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "fenceq: ")
	return strings.ReplaceAll(msg, ": fenceq: ", ": ")
}

// failure is a reported failure (check found inconsistencies): exit code 1,
// with nothing more to print.
var errFailed = errors.New("failed")

func main() {
	// go-redis prints its dial retries on its own; workerd reports a failed
	// connection once, with what to do about it.
	redis.SetLogger(quiet{})
	sigs := make(chan os.Signal, 2) // two signals in quick succession are both seen
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, hurry := interrupts(context.Background(), sigs, func() { signal.Stop(sigs) })
	os.Exit(run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, hurry: hurry}, os.Args[1:]))
}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr) // a usage error: nothing on standard output
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		var ue *usageError
		var ce *configError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errHelp):
			return 0
		case errors.Is(err, errFailed):
			return 1
		case errors.As(err, &ue):
			fmt.Fprintf(e.stderr, "workerd %s: %s\nRun 'workerd %s --help' for usage.\n", c.name, onePrefix(err), c.name)
			return 2
		case errors.As(err, &ce):
			fmt.Fprintf(e.stderr, "workerd %s: %s\n", c.name, onePrefix(err))
			return 2
		default:
			fmt.Fprintf(e.stderr, "workerd %s: %s\n", c.name, onePrefix(err))
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "workerd: unknown command %q\nRun 'workerd --help' for the commands.\n", args[0])
	return 2
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func usage(w io.Writer) {
	fmt.Fprint(w, "workerd runs fenceq workers and administers fenceq queues.\n\nUsage:\n  workerd COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'workerd COMMAND --help' for a command's flags.\nExit codes: 0 success, 1 failure, 2 usage or configuration error.\n")
}
