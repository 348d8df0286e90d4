package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A user's own worker program, built against this module: module
// example.com/app, whose package banner has an init function that prints a
// line and notes each run in a file, as a package that sets itself up at
// init time does. The exec handler's supervisor is that program run again;
// the job's result must be the command's output alone, and the program's
// init functions must have run only in the worker.
func TestExecUserProgramInitNotInSupervisor(t *testing.T) {
	t.Parallel()
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
		"go.mod": "module example.com/app\n\ngo 1.26.0\n\nrequire github.com/fenceq/fenceq v0.0.0\n\nreplace github.com/fenceq/fenceq => " + root + "\n",
		"go.sum": string(sum),
		"banner/banner.go": `package banner

import (
	"fmt"
	"os"
)

func init() {
	fmt.Println("app starting")
	f, err := os.OpenFile(os.Getenv("APP_INIT_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, os.Args[0])
		f.Close()
	}
}
`,
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	_ "example.com/app/banner"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec"
)

func main() {
	h, err := exec.New(exec.Config{Command: []string{"printf", "hi"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	job := handlers.NewJob(handlers.JobSpec{ID: "j1", Queue: "q", Kind: "k", Attempt: 1, MaxAttempts: 1})
	if err := h.ProcessJob(context.Background(), job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "result=%q\n", job.Result())
}
`,
	}
	if err := os.Mkdir(filepath.Join(dir, "banner"), 0o755); err != nil {
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
	if runs, _ := os.ReadFile(initLog); strings.Count(string(runs), "\n") != 1 {
		t.Errorf("the program's init function ran %d times, as:\n%s\nwant once, in the worker", strings.Count(string(runs), "\n"), runs)
	}
}
