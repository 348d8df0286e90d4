package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/broker"
)

// A Go service that runs its pools itself serves the API on its own mux.
func Example() {
	mr, _ := miniredis.Run() // a real Redis in production
	defer mr.Close()
	b, _ := broker.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), broker.Options{})
	h, err := api.New(api.Config{Broker: b, Token: "0123456789abcdef0123456789abcdef"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle(api.Mount, h) // every route is under /v1/
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/v1/queues/mail/jobs", strings.NewReader(`{"id": "welcome-42", "kind": "send", "payload": {"to": "ada"}}`))
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 201 {"id":"welcome-42","queue":"mail","created":true}
}
