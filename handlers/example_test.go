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

	job := handlers.NewJob("job-1", "images", "resize",
		[]byte(`{"url":"https://example.com/cat.png","width":640}`), 1, 5, 1, nil)
	err := mux.ProcessJob(context.Background(), job)
	fmt.Println("err:", err, "result:", string(job.Result()))

	// A kind with no handler fails permanently: retrying cannot help.
	err = mux.ProcessJob(context.Background(), handlers.NewJob("job-2", "images", "crop", nil, 1, 5, 1, nil))
	var perm *handlers.PermanentError
	fmt.Println("permanent:", errors.As(err, &perm))
	// Output:
	// attempt 1: resize https://example.com/cat.png to 640px
	// err: <nil> result: {"ok":true}
	// permanent: true
}
