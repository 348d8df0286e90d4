package handlers_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
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

	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{
		ID: "job-1", Queue: "images", Kind: "resize", Attempt: 1, MaxAttempts: 5, Generation: 1,
		Payload: []byte(`{"url":"https://example.com/cat.png","width":640}`),
	}})
	err := mux.ProcessJob(context.Background(), job)
	fmt.Println("err:", err, "result:", string(job.Result()))

	// A kind with no handler fails permanently: retrying cannot help.
	crop := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-2", Queue: "images", Kind: "crop", Attempt: 1, MaxAttempts: 5, Generation: 1}})
	err = mux.ProcessJob(context.Background(), crop)
	var perm *handlers.PermanentError
	fmt.Println("permanent:", errors.As(err, &perm))
	// Output:
	// attempt 1: resize https://example.com/cat.png to 640px
	// err: <nil> result: {"ok":true}
	// permanent: true
}

// ThumbnailArgs is the payload of a "thumbnail" job; its type names the
// kind, as broker.Args asks.
type ThumbnailArgs struct {
	URL  string `json:"url"`
	Size int    `json:"size"`
}

// Kind names the job kind; it reads nothing from the value.
func (ThumbnailArgs) Kind() string { return "thumbnail" }

// Register routes the kind that the args type names to a typed handler:
// the kind is written once, on the type, for producer and handler alike.
func ExampleRegister() {
	mux := handlers.NewMux()
	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, args ThumbnailArgs) error {
		fmt.Printf("%s job: thumbnail of %s at %dpx\n", job.Kind, args.URL, args.Size)
		return nil
	})
	fmt.Println("kinds:", mux.Kinds())

	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{
		ID: "job-1", Queue: "images", Kind: "thumbnail", Attempt: 1, MaxAttempts: 5, Generation: 1,
		Payload: []byte(`{"url":"https://example.com/cat.png","size":128}`),
	}})
	fmt.Println("err:", mux.ProcessJob(context.Background(), job))
	// Output:
	// kinds: [thumbnail]
	// thumbnail job: thumbnail of https://example.com/cat.png at 128px
	// err: <nil>
}
