//go:build unix

package exec

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/internal/capture"
)

// KillGraceDefault is how long a command has between SIGTERM and SIGKILL
// when Config.KillGrace is 0.
const KillGraceDefault = 10 * time.Second

const (
	// execStderrTail is how much of the end of standard error an error
	// message keeps: the end is where a failing program says why. A
	// command that succeeds has the same much of the start and of the end
	// of its standard error logged.
	execStderrTail = 4 << 10
	// execOutputDrain bounds the wait for the output pipes to close once the
	// process group is gone. Only a process that left the group (setsid) can
	// still hold them; the job must not hang on it.
	execOutputDrain = time.Second
)

// Config configures New.
type Config struct {
	Command            []string      // argv; Command[0] is looked up in PATH. Required.
	Dir                string        // working directory; default the current one
	Env                []string      // extra "KEY=value" entries, added to the worker's environment
	PermanentExitCodes []int         // exit codes that mean "do not retry": the job goes dead
	KillGrace          time.Duration // after SIGTERM, how long before SIGKILL; 0 means KillGraceDefault (10s)
	// Logger receives, at info level, the standard error of a command
	// that succeeded (its first and last 4 KiB). nil means slog.Default().
	Logger *slog.Logger
}

// New returns a Handler that runs a command for each job, so jobs can be
// handled without Go code.
//
// The payload is the command's standard input. Its environment is the
// worker's, plus cfg.Env, plus FENCEQ_JOB_ID, FENCEQ_JOB_QUEUE,
// FENCEQ_JOB_KIND, FENCEQ_ATTEMPT and FENCEQ_FENCING_TOKEN (the job's
// generation, in decimal). When it exits 0, its standard output (at most
// 1 MiB, ending in "[truncated]" when cut) becomes the job's result. An exit
// code listed in cfg.PermanentExitCodes fails the job permanently; any other
// failure is retried. Error messages carry the end of standard error; a
// command that succeeds has its standard error, if any, logged at info
// level with the job's queue, kind and id (the first and last 4 KiB, with
// the number of bytes left out between them).
//
// The command runs in its own process group. When the job's context is
// cancelled the whole group gets SIGTERM, and SIGKILL KillGrace later if the
// command has not exited; the error then wraps context.Cause. Whatever is
// still in the group once the command has exited is killed too: it would
// otherwise keep working for a job that is already settled, beyond the
// reach of its lease.
func New(cfg Config) (handlers.Handler, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("exec handler: a command is required")
	}
	name := cfg.Command[0]
	path := name
	if !strings.Contains(name, "/") {
		p, err := osexec.LookPath(name)
		if err != nil {
			return nil, lookPathError(name, " in PATH", err)
		}
		// Resolved once, so every job runs the same program.
		path = p
	} else {
		// A path with a slash is not searched for; os/exec takes a relative
		// one as relative to Dir, so check it there.
		check := name
		if cfg.Dir != "" && !filepath.IsAbs(name) {
			check = filepath.Join(cfg.Dir, name)
		}
		if _, err := osexec.LookPath(check); err != nil {
			return nil, lookPathError(name, "", err)
		}
	}
	if cfg.KillGrace < 0 {
		return nil, fmt.Errorf("exec %s: kill grace %v is negative: give a positive duration, or 0 for the default %v",
			name, cfg.KillGrace, KillGraceDefault)
	}
	for _, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("exec %s: environment entry %q is not of the form KEY=value", name, kv)
		}
	}
	grace := cfg.KillGrace
	if grace == 0 {
		grace = KillGraceDefault
	}
	// Copies, so a caller changing its config later does not change jobs
	// that are running.
	return &handler{
		path:      path,
		args:      slices.Clone(cfg.Command),
		dir:       cfg.Dir,
		env:       slices.Clone(cfg.Env),
		permanent: slices.Clone(cfg.PermanentExitCodes),
		grace:     grace,
		log:       cmp.Or(cfg.Logger, slog.Default()),
	}, nil
}

type handler struct {
	path      string
	args      []string
	dir       string
	env       []string
	permanent []int
	grace     time.Duration
	log       *slog.Logger
}

func (h *handler) ProcessJob(ctx context.Context, job *handlers.Job) error {
	name := h.args[0]
	if ctx.Err() != nil {
		return fmt.Errorf("exec %s: not started: %w", name, context.Cause(ctx))
	}

	cmd := osexec.Command(h.path, h.args[1:]...)
	cmd.Args[0] = name // argv[0] as configured, not the resolved path
	cmd.Dir = h.dir
	cmd.Env = append(append(os.Environ(), h.env...),
		"FENCEQ_JOB_ID="+job.ID,
		"FENCEQ_JOB_QUEUE="+job.Queue,
		"FENCEQ_JOB_KIND="+job.Kind,
		"FENCEQ_ATTEMPT="+strconv.Itoa(job.Attempt),
		"FENCEQ_FENCING_TOKEN="+strconv.FormatInt(job.Generation, 10),
	)
	// Its own group, so one signal reaches everything the command started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)

	// Pipes of our own rather than os/exec's: Cmd.Wait would wait for them
	// to close, and a grandchild holding one open would keep it waiting
	// before we could kill the group.
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
			return fmt.Errorf("exec %s: create pipe: %w", name, err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	stdinR, stdinW := pipes[0][0], pipes[0][1]
	stdoutR, stdoutW := pipes[1][0], pipes[1][1]
	stderrR, stderrW := pipes[2][0], pipes[2][1]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW

	if err := cmd.Start(); err != nil {
		closeAll()
		return fmt.Errorf("exec %s: start: %w", name, err)
	}
	// The child has its own copies; ours would keep the pipes from ever
	// reporting end of file.
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	defer stdinW.Close()
	defer stdoutR.Close()
	defer stderrR.Close()
	pgid := cmd.Process.Pid

	stdout := capture.NewHead(capture.ResultLimit)
	stderr := &stderrBuffer{tail: tailBuffer{limit: execStderrTail}}
	var copies sync.WaitGroup
	copies.Go(func() {
		// A command that exits without reading all of its input is not an
		// error: the write fails with EPIPE, which is ignored.
		stdinW.Write(job.Payload)
		stdinW.Close()
	})
	copies.Go(func() { copyAll(stdout, stdoutR) })
	copies.Go(func() { copyAll(stderr, stderrR) })

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var waitErr error
	stopped := "" // how the command was stopped, if it was
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		stopped = "sent SIGTERM to its process group"
		signalGroup(pgid, syscall.SIGTERM)
		timer := time.NewTimer(h.grace)
		select {
		case waitErr = <-waited:
		case <-timer.C:
			stopped = fmt.Sprintf("sent SIGTERM to its process group, then SIGKILL after %v", h.grace)
			signalGroup(pgid, syscall.SIGKILL)
			waitErr = <-waited
		}
		timer.Stop()
	}
	// The command has exited; nothing it started may outlive it.
	signalGroup(pgid, syscall.SIGKILL)

	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(execOutputDrain):
		// Closing the read ends ends the copies; the deferred closes then
		// find them closed already, which is harmless.
		stdinW.Close()
		stdoutR.Close()
		stderrR.Close()
		<-drained
	}

	if stopped != "" {
		// The cause is what the worker acts on (lease lost, cancelled, ...),
		// whatever the command made of the signal.
		return fmt.Errorf("exec %s: %s: %w", name, stopped, context.Cause(ctx))
	}
	if waitErr == nil {
		job.SetResult(stdout.Bytes())
		if stderr.total > 0 {
			// Warnings of a command that worked are still worth reading.
			h.log.LogAttrs(ctx, slog.LevelInfo, "exec command succeeded and wrote to standard error",
				slog.Group("job", slog.String("queue", job.Queue), slog.String("id", job.ID), slog.String("kind", job.Kind),
					slog.Int("attempt", job.Attempt), slog.Int64("generation", job.Generation)),
				slog.String("command", name), slog.String("stderr", stderr.text()),
				slog.Int64("stderr_bytes", stderr.total))
		}
		return nil
	}
	detail := ""
	if tail := stderr.tail.String(); tail != "" {
		detail = ": " + tail
	}
	var exitErr *osexec.ExitError
	if !errors.As(waitErr, &exitErr) {
		return fmt.Errorf("exec %s: wait: %w%s", name, waitErr, detail)
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Errorf("exec %s: killed by signal %d (%v)%s", name, int(ws.Signal()), ws.Signal(), detail)
	}
	code := exitErr.ExitCode()
	err := fmt.Errorf("exec %s: exit %d%s", name, code, detail)
	if slices.Contains(h.permanent, code) {
		return handlers.Permanent(err)
	}
	return err
}

// lookPathError explains why LookPath rejected name; where says where
// it looked.
func lookPathError(name, where string, err error) error {
	if errors.Is(err, osexec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		// LookPath's own message would only say the same again.
		return fmt.Errorf("exec %s: not found%s: install it or give a full path", name, where)
	}
	// Found, but not runnable: not executable, or found relative to the
	// current directory (os/exec's ErrDot).
	return fmt.Errorf("exec %s: cannot run it: %w", name, err)
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

// stderrBuffer keeps the first execStderrTail bytes of standard error,
// the last ones (in tail), and how many there were.
type stderrBuffer struct {
	head  []byte
	tail  tailBuffer
	total int64
}

func (b *stderrBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := execStderrTail - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	return b.tail.Write(p)
}

// text is the whole of standard error when it was at most twice
// execStderrTail, else its first and last execStderrTail bytes with a
// note of how many were left out between them.
func (b *stderrBuffer) text() string {
	var s string
	if rest := b.total - int64(len(b.head)); rest <= execStderrTail {
		s = string(b.head) + string(b.tail.last(int(rest)))
	} else {
		dropped := b.total - 2*execStderrTail
		s = fmt.Sprintf("%s\n[... %d bytes left out ...]\n%s", b.head, dropped, b.tail.last(execStderrTail))
	}
	return strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	limit int
	buf   []byte
	cut   bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	// Trim only once twice the limit has piled up, so each byte is copied
	// a bounded number of times.
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
		t.cut = true
	}
	return len(p), nil
}

// last is the last n bytes written, n at most limit.
func (t *tailBuffer) last(n int) []byte { return t.buf[len(t.buf)-n:] }

// String is the kept tail, without surrounding white space, starting with
// "..." when earlier output was dropped.
func (t *tailBuffer) String() string {
	b := t.buf
	cut := t.cut
	if len(b) > t.limit {
		b = b[len(b)-t.limit:]
		cut = true
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if cut && s != "" {
		s = "..." + s
	}
	return s
}
