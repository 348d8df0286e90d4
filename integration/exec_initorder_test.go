package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What the exec handler's doc says of init functions in the supervisor
// ("What dies with the worker"), against a user's program as in
// TestExecUserProgramInitNotInSupervisor. A package whose init needs only
// package os, and whose import path sorts before fenceq's, is initialized
// before the supervisor takes over, and no single binary can go first:
// its init runs in each supervisor too, its output going nowhere. The
// remedy the doc gives, importing handlers/exec in that package, makes it
// run in the worker alone.
func TestExecUserProgramInitOrder(t *testing.T) {
	t.Parallel()
	t.Run("an init that needs only os", func(t *testing.T) {
		t.Parallel()
		runs := runInitProgram(t, "")
		if len(runs) != 2 || runs[1] != "fenceq-exec-supervisor" {
			t.Errorf("the init function ran as %q, want in the worker and in the supervisor, as the package doc says", runs)
		}
	})
	t.Run("the same in a package that imports handlers/exec", func(t *testing.T) {
		t.Parallel()
		runs := runInitProgram(t, `_ "github.com/fenceq/fenceq/handlers/exec"`)
		if len(runs) != 1 {
			t.Errorf("the init function ran as %q, want once, in the worker", runs)
		}
	})
}

// runInitProgram runs runUserProgram with a package example.com/app/early,
// importing os and imports, that writes a line to its standard output and
// notes os.Args[0] in a file at init time.
func runInitProgram(t *testing.T, imports string) []string {
	t.Helper()
	return runUserProgram(t, "early", `package early

import (
	"os"
	`+imports+`
)

func init() {
	os.Stdout.WriteString("app starting\n")
	f, err := os.OpenFile(os.Getenv("APP_INIT_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		f.WriteString(os.Args[0] + "\n")
		f.Close()
	}
}
`)
}

// runUserProgram builds a user's worker program against this module
// (module example.com/app, with the package pkg of source, which notes
// each run of its init in the file $APP_INIT_LOG), runs one job of printf
// hi through the exec handler, checks that the job's result is the
// command's output alone, and answers the argv[0] of each run of that
// init.
func runUserProgram(t *testing.T, pkg, source string) []string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":                "module example.com/app\n\ngo 1.26.0\n\nrequire github.com/fenceq/fenceq v0.0.0\n\nreplace github.com/fenceq/fenceq => " + root + "\n",
		"go.sum":                string(sum),
		pkg + "/" + pkg + ".go": source,
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	_ "example.com/app/` + pkg + `"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec"
	"github.com/fenceq/fenceq/jobrow"
)

func main() {
	h, err := exec.New(exec.Config{Command: []string{"printf", "hi"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "j1", Queue: "q", Kind: "k", Attempt: 1, MaxAttempts: 1}})
	if err := h.ProcessJob(context.Background(), job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "result=%q\n", job.Result())
}
`,
	}
	if err := os.Mkdir(filepath.Join(dir, pkg), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		writeFile(t, filepath.Join(dir, name), text, 0o644)
	}
	bin := filepath.Join(dir, "app")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the user's program: %v\n%s", err, out)
	}
	initLog := filepath.Join(dir, "init.log")
	run := exec.Command(bin)
	run.Env = append(os.Environ(), "APP_INIT_LOG="+initLog)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the user's program: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `result="hi"`) {
		t.Errorf("the job's result is not the command's output alone:\n%s", out)
	}
	runs, _ := os.ReadFile(initLog)
	return strings.Fields(string(runs))
}
