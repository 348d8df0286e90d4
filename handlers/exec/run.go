//go:build unix

package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec/internal/supervise"
	"github.com/fenceq/fenceq/handlers/internal/capture"
)

// outputDrain bounds the wait for the output pipes to close once the
// supervisor has exited. Only a process that escaped it (one the kernel
// could not re-parent to the supervisor) can still hold them; the job must
// not hang on it.
const outputDrain = time.Second

// statusLimit bounds what is read of the supervisor's status line.
const statusLimit = 4 << 10

// ProcessJob runs the command for job, in five steps: start it under a
// supervisor (package supervise), in a process group of its own, feed it the
// payload while collecting its output, wait for it to exit or for the
// job's context to end, and turn how it ended into the job's outcome. The
// supervisor exits once the command has, and has killed everything it
// left behind.
func (h *handler) ProcessJob(ctx context.Context, job *handlers.Job) error {
	if ctx.Err() != nil {
		return fmt.Errorf("exec %s: not started: %w", h.name(), context.Cause(ctx))
	}
	p, err := h.start(ctx, job)
	if err != nil {
		return err
	}
	defer p.closePipes()
	p.feed(job.Payload)
	stopped, waitErr := p.wait(ctx, h.grace)
	// Read now, while the supervisor's exit has just closed the status
	// pipe's only write end: finish may close our end, when something
	// outside the command's tree holds its output past outputDrain.
	status := p.readStatus()
	p.finish()

	if stopped != "" {
		// The cause is what the worker acts on (lease lost, cancelled, ...),
		// whatever the command made of the signal.
		return fmt.Errorf("exec %s: %s: %w", h.name(), stopped, context.Cause(ctx))
	}
	status, left, _ := strings.Cut(status, "\n")
	if left != "" {
		h.log.LogAttrs(ctx, slog.LevelWarn, "exec command left processes its supervisor could not kill",
			jobAttrs(job), slog.String("command", h.name()), slog.String("left", strings.TrimPrefix(left, "left ")))
	}
	if err := h.outcome(waitErr, status, p.stderr.tail.String()); err != nil {
		if left != "" {
			return fmt.Errorf("%w (and it %s)", err, left)
		}
		return err
	}
	h.succeed(ctx, job, p)
	return nil
}

// name is the command as configured, for messages and argv[0].
func (h *handler) name() string { return h.args[0] }

// process is one run of the command: its supervisor, our ends of the
// command's pipes and of the supervisor's, and what the command wrote.
type process struct {
	cmd                    *osexec.Cmd // the supervisor
	stdin                  *os.File    // write end
	stdoutPipe, stderrPipe *os.File    // read ends
	control                *os.File    // write end: 't' asks for SIGTERM, closing it for SIGKILL
	status                 *os.File    // read end: how the command ended
	stdout                 *capture.Head
	stderr                 *stderrBuffer
	copies                 sync.WaitGroup // feed's goroutines
}

// start starts the command for job, with the job (and the trace context
// of the span in ctx) in its environment.
//
// Its pipes are our own rather than os/exec's: Cmd.Wait would wait for
// those to close, and a grandchild holding one open would keep it waiting
// before we could kill the group.
func (h *handler) start(ctx context.Context, job *handlers.Job) (*process, error) {
	cmd, err := h.command(ctx, job)
	if err != nil {
		return nil, err
	}
	var pipes [5][2]*os.File // stdin, stdout, stderr, control, status; [read end, write end]
	closeAll := func() {
		for _, p := range pipes {
			for _, f := range p {
				if f != nil {
					f.Close()
				}
			}
		}
	}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("exec %s: create pipe: %w", h.name(), err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	// fds 3 to 7 of the supervisor (see package supervise); its own 0, 1
	// and 2 are /dev/null, so that nothing it writes there, the init
	// function of a user's package, say, reaches the job's result. The
	// write end of control is ours alone (close-on-exec), so the kernel
	// closes it when we die.
	cmd.ExtraFiles = []*os.File{pipes[3][0], pipes[4][1], pipes[0][0], pipes[1][1], pipes[2][1]}
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, fmt.Errorf("exec %s: start its supervisor: %w", h.name(), err)
	}
	// The child has its own copies; ours would keep the pipes from ever
	// reporting end of file.
	pipes[0][0].Close()
	pipes[1][1].Close()
	pipes[2][1].Close()
	pipes[3][0].Close()
	pipes[4][1].Close()
	return &process{
		cmd:        cmd,
		stdin:      pipes[0][1],
		stdoutPipe: pipes[1][0],
		stderrPipe: pipes[2][0],
		control:    pipes[3][1],
		status:     pipes[4][0],
		stdout:     capture.NewHead(capture.ResultLimit),
		stderr:     &stderrBuffer{tail: tailBuffer{limit: stderrTail}},
	}, nil
}

// command is the supervisor of the command for job, with what it passes on
// to it: the worker's environment, the configured one, the job's and the
// trace context of the span in ctx. The supervisor leads a process group
// of its own, apart from the worker's, so that a terminal's Ctrl-C does not
// reach it; it starts the command in another, so that one signal reaches
// everything the command starts.
func (h *handler) command(ctx context.Context, job *handlers.Job) (*osexec.Cmd, error) {
	self, err := supervise.Executable()
	if err != nil {
		return nil, fmt.Errorf("exec %s: find this program to run the command's supervisor: %w", h.name(), err)
	}
	cmd := &osexec.Cmd{
		Path: self,
		// argv[0] of the command as configured, not the resolved path.
		Args: append([]string{supervise.Arg0, h.path, h.name()}, h.args[1:]...),
		Dir:  h.dir,
	}
	cmd.Env = append(append(os.Environ(), h.env...),
		"FENCEQ_JOB_ID="+job.ID,
		"FENCEQ_JOB_QUEUE="+job.Queue,
		"FENCEQ_JOB_KIND="+job.Kind,
		"FENCEQ_ATTEMPT="+strconv.Itoa(job.Attempt),
		"FENCEQ_FENCING_TOKEN="+strconv.FormatInt(job.Generation, 10),
		"FENCEQ_GROUP="+job.Group, // always set: empty for a job without a group, whatever the worker's environment holds
	)
	cmd.Env = append(cmd.Env, traceEnv(ctx)...)
	cmd.Env = append(cmd.Env, supervise.EnvEntry)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// feed writes payload to the command's standard input and closes it, and
// collects its standard output and error: each in a goroutine of its own,
// so that no pipe can fill up and block the command.
func (p *process) feed(payload []byte) {
	p.copies.Go(func() {
		// A command that exits without reading all of its input is not an
		// error: the write fails with EPIPE, which is ignored.
		p.stdin.Write(payload)
		p.stdin.Close()
	})
	p.copies.Go(func() { copyAll(p.stdout, p.stdoutPipe) })
	p.copies.Go(func() { copyAll(p.stderr, p.stderrPipe) })
}

// wait waits for the supervisor to exit and answers what Cmd.Wait did.
// When ctx ends first, the command's group gets SIGTERM, and everything
// the command started SIGKILL grace later if the command has not exited by
// then; stopped says which were sent.
func (p *process) wait(ctx context.Context, grace time.Duration) (stopped string, err error) {
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err = <-exited:
		return "", err
	case <-ctx.Done():
	}
	stopped = "sent SIGTERM to its process group"
	// An error means the supervisor is gone already: exited is about to
	// say so.
	_, _ = p.control.Write([]byte{supervise.TermRequest})
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err = <-exited:
	case <-timer.C:
		stopped = fmt.Sprintf("sent SIGTERM to its process group, then SIGKILL after %v", grace)
		p.control.Close()
		err = <-exited
	}
	return stopped, err
}

// finish waits for the copies of feed to end, at most outputDrain, once
// the supervisor has exited; it killed whatever the command left, which
// would otherwise keep working for a job that is settled, beyond the
// reach of its lease.
func (p *process) finish() {
	p.control.Close()
	drained := make(chan struct{})
	go func() { p.copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrain):
		// Closing the read ends ends the copies; closing them again later
		// is harmless.
		p.closePipes()
		<-drained
	}
}

// closePipes closes our ends of the command's pipes and the supervisor's.
func (p *process) closePipes() {
	p.stdin.Close()
	p.stdoutPipe.Close()
	p.stderrPipe.Close()
	p.control.Close()
	p.status.Close()
}

// readStatus is the supervisor's report of how the command ended (see
// supervise), read once the supervisor has exited: "" if it wrote none.
func (p *process) readStatus() string {
	b, _ := io.ReadAll(io.LimitReader(p.status, statusLimit))
	return strings.TrimSpace(string(b))
}

// succeed makes the command's standard output the job's result, and logs
// what it wrote to standard error, if anything: warnings of a command that
// worked are still worth reading.
func (h *handler) succeed(ctx context.Context, job *handlers.Job, p *process) {
	job.SetResult(p.stdout.Bytes())
	if p.stderr.total == 0 {
		return
	}
	h.log.LogAttrs(ctx, slog.LevelInfo, "exec command succeeded and wrote to standard error",
		jobAttrs(job), slog.String("command", h.name()), slog.String("stderr", p.stderr.text()),
		slog.Int64("stderr_bytes", p.stderr.total))
}

// jobAttrs names job in a log record.
func jobAttrs(job *handlers.Job) slog.Attr {
	return slog.Group("job", slog.String("queue", job.Queue), slog.String("id", job.ID), slog.String("kind", job.Kind),
		slog.Int("attempt", job.Attempt), slog.Int64("generation", job.Generation))
}

// outcome is nil for a command that exited 0, else its error, ending with
// the end of its standard error: permanent when its exit code is one of
// the configured ones, to be retried otherwise. status is the
// supervisor's report, waitErr how the supervisor itself ended.
func (h *handler) outcome(waitErr error, status, stderrTail string) error {
	detail := ""
	if stderrTail != "" {
		detail = ": " + stderrTail
	}
	verb, arg, _ := strings.Cut(status, " ")
	n, numErr := strconv.Atoi(arg)
	switch {
	case verb == "start":
		return fmt.Errorf("exec %s: start: %s%s", h.name(), arg, detail)
	case verb == "signal" && numErr == nil:
		sig := syscall.Signal(n)
		return fmt.Errorf("exec %s: killed by signal %d (%v)%s", h.name(), n, sig, detail)
	case verb == "exit" && numErr == nil && n == 0:
		return nil
	case verb == "exit" && numErr == nil:
		err := fmt.Errorf("exec %s: exit %d%s", h.name(), n, detail)
		if slices.Contains(h.permanent, n) {
			return handlers.Permanent(err)
		}
		return err
	}
	// No report: the supervisor was killed (SIGKILL from outside), or this
	// program is not one that can supervise (a plugin or c-shared build,
	// whose /proc/self/exe is another program).
	if waitErr == nil {
		waitErr = errors.New("exited 0")
	}
	return fmt.Errorf("exec %s: its supervisor (%s, run again) ended without saying how the command did: %w%s",
		h.name(), selfName(), waitErr, detail)
}

// selfName is this program, for messages.
func selfName() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "this program"
}

// copyAll reads r to its end into w. A read error ends the copy: output
// lost to a broken pipe cannot be recovered, and the exit status still says
// how the command went.
func copyAll(w io.Writer, r io.Reader) { _, _ = io.Copy(w, r) }
