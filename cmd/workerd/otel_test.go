package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a fake OTLP/HTTP collector: it keeps every span posted
// to /v1/traces, with its resource's service.name.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // per span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, s)
				r.service = append(r.service, service)
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// span is the received span of that name, and its resource's service.name.
func (r *otlpReceiver) span(name string) (*tracepb.Span, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range r.spans {
		if s.Name == name {
			return s, r.service[i]
		}
	}
	return nil, ""
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, `workerd enqueue` and `workerd run`
// export their spans over OTLP/HTTP, and a job's two spans are one trace:
// the process span is the enqueue span's child, and the exec handler's
// command gets the process span's context as TRACEPARENT.
func TestWorkerdExportsTraces(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	// The exporter reads the process's environment itself.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	c := newCLI(t)
	cfg := writeConfig(t, `
http: "off"
pools:
  - queues: [q]
    poll_interval: 20ms
handlers:
  k:
    exec: {command: [/bin/sh, -c, 'printf %s "$TRACEPARENT"']}
`)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	logs := newLineWatch()
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: logs, getenv: os.Getenv}
		done <- run(ctx, e, []string{"run", "--config", cfg, "--redis", c.url, "--log-format", "json"})
	}()
	logs.wait(t, "workerd exports traces over OTLP/HTTP")
	logs.wait(t, "workerd running")

	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: os.Getenv}
	if code := run(context.Background(), e, []string{"enqueue", "q", "k", "--wait", "--redis", c.url}); code != 0 {
		t.Fatalf("enqueue exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	var job struct{ Result string }
	if err := json.Unmarshal(out.Bytes(), &job); err != nil {
		t.Fatalf("enqueue --wait printed %q: %v", out.String(), err)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d:\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop:\n%s", logs.String())
	}

	// Both commands flushed their spans as they exited.
	enq, enqService := recv.span("enqueue q")
	proc, procService := recv.span("process q")
	if enq == nil || proc == nil {
		t.Fatalf("received enqueue span %v, process span %v; want both\n%s", enq, proc, logs.String())
	}
	if !bytes.Equal(enq.TraceId, proc.TraceId) || !bytes.Equal(proc.ParentSpanId, enq.SpanId) {
		t.Fatalf("process span in trace %x under %x; want the enqueue span's trace %x under it (%x)",
			proc.TraceId, proc.ParentSpanId, enq.TraceId, enq.SpanId)
	}
	if enqService != "workerd" || procService != "workerd" {
		t.Fatalf("service.name %q and %q, want workerd", enqService, procService)
	}
	if want := "00-" + hex.EncodeToString(proc.TraceId) + "-" + hex.EncodeToString(proc.SpanId) + "-01"; job.Result != want {
		t.Fatalf("the command's TRACEPARENT was %q, want the process span's %q", job.Result, want)
	}
}

// An OTLP protocol workerd does not speak is refused at start, naming the
// variable, what to set instead and the port; with the SDK disabled or the
// exporter set to none, the variables are not read at all.
func TestWorkerdOTLPSettings(t *testing.T) {
	c := newCLI(t)
	enqueue := func(vars map[string]string) (int, string) {
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
		code := run(context.Background(), e, []string{"enqueue", "q", "k", "--redis", c.url})
		return code, errOut.String()
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"Grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			[]string{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "http/protobuf", "4318"}},
		{"TracesJSON", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			[]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf", "4318"}},
		{"OtherExporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"},
			[]string{"OTEL_TRACES_EXPORTER=zipkin", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := enqueue(tc.vars)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (configuration); stderr:\n%s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("message %q does not say %q", stderr, w)
				}
			}
		})
	}
	for _, off := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, // no endpoint: tracing is off
	} {
		if code, stderr := enqueue(off); code != 0 || stderr != "" {
			t.Errorf("with %v: exit %d, stderr %q; want tracing off, quietly", off, code, stderr)
		}
	}
}
