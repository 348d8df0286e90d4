package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/webhook"
	"github.com/fenceq/fenceq/jobrow"
)

// A web service handles each job: the payload is POSTed to it, with the
// job's id, kind, attempt and fencing token in headers, and the body of a
// 2xx response becomes the job's result.
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s sent, fencing token %s", payload, r.Header.Get("Fenceq-Fencing-Token"))
	}))
	defer srv.Close()

	h, err := webhook.New(webhook.Config{URL: srv.URL + "/jobs"})
	if err != nil {
		fmt.Println(err)
		return
	}
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "mail", Kind: "send_email", Generation: 42, Payload: []byte(`{"to":"ada"}`)}})
	err = h.ProcessJob(context.Background(), job)
	fmt.Println("err:", err, "result:", string(job.Result()))
	// Output:
	// err: <nil> result: {"to":"ada"} sent, fencing token 42
}
