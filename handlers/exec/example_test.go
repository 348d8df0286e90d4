//go:build unix

package exec_test

import (
	"context"
	"fmt"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec"
	"github.com/fenceq/fenceq/jobrow"
)

// A command handles each job: the payload is its standard input, and what
// it writes to standard output becomes the job's result.
func ExampleNew() {
	h, err := exec.New(exec.Config{
		Command:            []string{"tr", "a-z", "A-Z"},
		PermanentExitCodes: []int{65}, // EX_DATAERR: retrying cannot fix the payload
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := handlers.NewMux()
	mux.Handle("shout", h)

	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "default", Kind: "shout", Payload: []byte("hello")}})
	err = mux.ProcessJob(context.Background(), job)
	fmt.Println("err:", err, "result:", string(job.Result()))
	// Output:
	// err: <nil> result: HELLO
}
