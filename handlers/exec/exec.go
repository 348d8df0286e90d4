//go:build unix

package exec

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec/internal/supervise"
)

// KillGraceDefault is how long a command has between SIGTERM and SIGKILL
// when Config.KillGrace is 0.
const KillGraceDefault = 10 * time.Second

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
// FENCEQ_JOB_KIND, FENCEQ_ATTEMPT, FENCEQ_FENCING_TOKEN (the job's
// generation, in decimal) and FENCEQ_GROUP (the job's group; always set,
// empty when the job has none, so a FENCEQ_GROUP in the worker's or
// cfg.Env's environment never reaches a command), plus, when ctx holds
// a span (the pool's span of the attempt, when tracing), its W3C trace
// context in TRACEPARENT and TRACESTATE: upper case, as OpenTelemetry's
// specification for environment variables as carriers has it. When it
// exits 0, its standard output (at most 1 MiB, ending in "[truncated]"
// when cut) becomes the job's result. An exit
// code listed in cfg.PermanentExitCodes fails the job permanently; any other
// failure is retried. Error messages carry the end of standard error; a
// command that succeeds has its standard error, if any, logged at info
// level with the job's queue, kind and id (the first and last 4 KiB, with
// the number of bytes left out between them).
//
// The command runs in its own process group, under a supervisor that
// outlives the worker (see the package documentation). When the job's
// context is cancelled the whole group gets SIGTERM, and everything the
// command started SIGKILL KillGrace later if the command has not exited;
// the error then wraps context.Cause. Whatever the command left once it
// has exited is killed too, as is all of it when the worker dies: it would
// otherwise keep working for a job that is already settled, or that another
// worker runs again, beyond the reach of its lease. "All" is the group, and
// on Linux also what left it (setsid).
func New(cfg Config) (handlers.Handler, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, &handlers.ValidationError{Handler: "exec handler", Field: "Command", Reason: "a command is required"}
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
		return nil, &handlers.ValidationError{Handler: "exec " + name, Field: "KillGrace", Value: cfg.KillGrace.String(),
			Reason: fmt.Sprintf("kill grace %v is negative: give a positive duration, or 0 for the default %v", cfg.KillGrace, KillGraceDefault)}
	}
	for _, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, &handlers.ValidationError{Handler: "exec " + name, Field: "Env", Value: kv,
				Reason: fmt.Sprintf("environment entry %q is not of the form KEY=value", kv)}
		}
	}
	grace := cfg.KillGrace
	if grace == 0 {
		grace = KillGraceDefault
	}
	// A program that cannot run itself again as the supervisor says so
	// now, not at each job.
	if _, err := supervise.Executable(); err != nil {
		return nil, fmt.Errorf("exec %s: this program cannot supervise its commands: %w", name, err)
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

// lookPathError explains why LookPath rejected name; where says where
// it looked.
func lookPathError(name, where string, err error) error {
	if errors.Is(err, osexec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		// LookPath's own message would only say the same again.
		return &handlers.ValidationError{Handler: "exec " + name, Field: "Command", Value: name,
			Reason: "not found" + where + ": install it or give a full path"}
	}
	// Found, but not runnable: not executable, or found relative to the
	// current directory (os/exec's ErrDot).
	return &handlers.ValidationError{Handler: "exec " + name, Field: "Command", Value: name, Reason: "cannot run it", Err: err}
}
