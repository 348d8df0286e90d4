package integration

import (
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
	runs := runUserProgram(t, "banner", `package banner

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
`)
	if len(runs) != 1 {
		t.Errorf("the program's init function ran %d times, as:\n%s\nwant once, in the worker", len(runs), strings.Join(runs, "\n"))
	}
}
