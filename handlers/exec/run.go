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
	"sync"
	"syscall"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/internal/capture"
)

// outputDrain bounds the wait for the output pipes to close once the
// process group is gone. Only a process that left the group (setsid) can
// still hold them; the job must not hang on it.
const outputDrain = time.Second

// ProcessJob runs the command for job, in five steps: start it in a
// process group of its own, feed it the payload while collecting its
// output, wait for it to exit or for the job's context to end, kill what is
// left of its group, and turn how it ended into the job's outcome.
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
	p.finish()

	if stopped != "" {
		// The cause is what the worker acts on (lease lost, cancelled, ...),
		// whatever the command made of the signal.
		return fmt.Errorf("exec %s: %s: %w", h.name(), stopped, context.Cause(ctx))
	}
	if waitErr != nil {
		return h.failure(waitErr, p.stderr.tail.String())
	}
	h.succeed(ctx, job, p)
	return nil
}

// name is the command as configured, for messages and argv[0].
func (h *handler) name() string { return h.args[0] }

// process is one run of the command: the started process, which leads a
// process group of its own, our ends of its pipes, and what it wrote.
type process struct {
	cmd                    *osexec.Cmd
	stdin                  *os.File // write end
	stdoutPipe, stderrPipe *os.File // read ends
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
	cmd := h.command(ctx, job)
	var pipes [3][2]*os.File // stdin, stdout, stderr; [read end, write end]
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
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0][0], pipes[1][1], pipes[2][1]
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, fmt.Errorf("exec %s: start: %w", h.name(), err)
	}
	// The child has its own copies; ours would keep the pipes from ever
	// reporting end of file.
	pipes[0][0].Close()
	pipes[1][1].Close()
	pipes[2][1].Close()
	return &process{
		cmd:        cmd,
		stdin:      pipes[0][1],
		stdoutPipe: pipes[1][0],
		stderrPipe: pipes[2][0],
		stdout:     capture.NewHead(capture.ResultLimit),
		stderr:     &stderrBuffer{tail: tailBuffer{limit: stderrTail}},
	}, nil
}

// command is the command for job: the worker's environment, the
// configured one, the job's and the trace context of the span in ctx, in a
// process group of its own so that one signal reaches everything it starts.
func (h *handler) command(ctx context.Context, job *handlers.Job) *osexec.Cmd {
	cmd := osexec.Command(h.path, h.args[1:]...)
	cmd.Args[0] = h.name() // argv[0] as configured, not the resolved path
	cmd.Dir = h.dir
	cmd.Env = append(append(os.Environ(), h.env...),
		"FENCEQ_JOB_ID="+job.ID,
		"FENCEQ_JOB_QUEUE="+job.Queue,
		"FENCEQ_JOB_KIND="+job.Kind,
		"FENCEQ_ATTEMPT="+strconv.Itoa(job.Attempt),
		"FENCEQ_FENCING_TOKEN="+strconv.FormatInt(job.Generation, 10),
	)
	cmd.Env = append(cmd.Env, traceEnv(ctx)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	return cmd
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

// wait waits for the command to exit and answers what Cmd.Wait did. When
// ctx ends first, the command's group gets SIGTERM, and SIGKILL grace later
// if the command has not exited by then; stopped says which were sent.
func (p *process) wait(ctx context.Context, grace time.Duration) (stopped string, err error) {
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err = <-exited:
		return "", err
	case <-ctx.Done():
	}
	pgid := p.cmd.Process.Pid
	stopped = "sent SIGTERM to its process group"
	signalGroup(pgid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err = <-exited:
	case <-timer.C:
		stopped = fmt.Sprintf("sent SIGTERM to its process group, then SIGKILL after %v", grace)
		signalGroup(pgid, syscall.SIGKILL)
		err = <-exited
	}
	return stopped, err
}

// finish kills whatever is still in the command's group once the command
// has exited: it would otherwise keep working for a job that is settled,
// beyond the reach of its lease. Then it waits for the copies of feed to
// end, at most outputDrain.
func (p *process) finish() {
	signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
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

// closePipes closes our ends of the command's pipes.
func (p *process) closePipes() {
	p.stdin.Close()
	p.stdoutPipe.Close()
	p.stderrPipe.Close()
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
		slog.Group("job", slog.String("queue", job.Queue), slog.String("id", job.ID), slog.String("kind", job.Kind),
			slog.Int("attempt", job.Attempt), slog.Int64("generation", job.Generation)),
		slog.String("command", h.name()), slog.String("stderr", p.stderr.text()),
		slog.Int64("stderr_bytes", p.stderr.total))
}

// failure is the error of a command that exited with waitErr, ending with
// the end of its standard error: permanent when its exit code is one of
// the configured ones, to be retried otherwise.
func (h *handler) failure(waitErr error, stderrTail string) error {
	detail := ""
	if stderrTail != "" {
		detail = ": " + stderrTail
	}
	var exitErr *osexec.ExitError
	if !errors.As(waitErr, &exitErr) {
		return fmt.Errorf("exec %s: wait: %w%s", h.name(), waitErr, detail)
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Errorf("exec %s: killed by signal %d (%v)%s", h.name(), int(ws.Signal()), ws.Signal(), detail)
	}
	code := exitErr.ExitCode()
	err := fmt.Errorf("exec %s: exit %d%s", h.name(), code, detail)
	if slices.Contains(h.permanent, code) {
		return handlers.Permanent(err)
	}
	return err
}

// signalGroup sends sig to the process group pgid. ESRCH, when the group is
// already gone, is what we wanted anyway.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// copyAll reads r to its end into w. A read error ends the copy: output
// lost to a broken pipe cannot be recovered, and the exit status still says
// how the command went.
func copyAll(w io.Writer, r io.Reader) { _, _ = io.Copy(w, r) }
