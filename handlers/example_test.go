package handlers_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenceq/fenceq/handlers"
)

// ResizeArgs is the payload of a "resize" job.
type ResizeArgs struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

// A Mux routes jobs by kind; JSON decodes each job's payload into typed
// arguments, and fails the job permanently when it does not decode.
func ExampleMux() {
	mux := handlers.NewMux()
	mux.Handle("resize", handlers.JSON(func(ctx context.Context, job *handlers.Job, args ResizeArgs) error {
		fmt.Printf("attempt %d: resize %s to %dpx\n", job.Attempt, args.URL, args.Width)
		job.SetResult([]byte(`{"ok":true}`))
		return nil
	}))

	job := handlers.NewJob(handlers.JobSpec{
		ID: "job-1", Queue: "images", Kind: "resize", Attempt: 1, MaxAttempts: 5, Generation: 1,
		Payload: []byte(`{"url":"https://example.com/cat.png","width":640}`),
	})
	err := mux.ProcessJob(context.Background(), job)
	fmt.Println("err:", err, "result:", string(job.Result()))

	// A kind with no handler fails permanently: retrying cannot help.
	crop := handlers.NewJob(handlers.JobSpec{ID: "job-2", Queue: "images", Kind: "crop", Attempt: 1, MaxAttempts: 5, Generation: 1})
	err = mux.ProcessJob(context.Background(), crop)
	var perm *handlers.PermanentError
	fmt.Println("permanent:", errors.As(err, &perm))
	// Output:
	// attempt 1: resize https://example.com/cat.png to 640px
	// err: <nil> result: {"ok":true}
	// permanent: true
}
