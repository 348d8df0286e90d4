package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// runDevCmd runs workerd dev in the background with ctx, its standard
// output on a lineWatch; the channel gets its exit code.
func runDevCmd(ctx context.Context, args ...string) (*lineWatch, <-chan int) {
	out := newLineWatch()
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: out, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
		done <- run(ctx, e, append([]string{"dev"}, args...))
	}()
	return out, done
}

func exitCode(t *testing.T, done <-chan int, out *lineWatch) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(60 * time.Second): // a hang, not a slow machine
		t.Fatalf("workerd dev did not stop:\n%s", out.String())
		return 0
	}
}

// dev says what it enqueues at start, shows the jobs arriving while the
// pool already works, says when they are all in, and on Ctrl-C says how
// long stopping may take and that a second Ctrl-C stops at once.
func TestDevEnqueuesWhileItShowsProgress(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := runDevCmd(ctx, "--jobs", "1200")
	out.wait(t, "workerd dev: enqueueing 1200 demo jobs, 500 per round trip")
	out.wait(t, "workerd dev: enqueued 1200 demo jobs in")
	cancel()
	out.wait(t, "workerd dev: stopping: running jobs have up to 5s to finish (15s at most in all); Ctrl-C again stops at once")
	if code := exitCode(t, done, out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	m := regexp.MustCompile(`stopped after \S+; (\d+) demo jobs enqueued`).FindStringSubmatch(out.String())
	if n := 0; m == nil {
		t.Fatalf("no summary:\n%s", out.String())
	} else if n, _ = strconv.Atoi(m[1]); n < 1200 {
		t.Fatalf("summary counts %d jobs enqueued, want at least the 1200 asked for:\n%s", n, out.String())
	}
}

// --exit-after is the user's request: reached while the first jobs are
// still going in, it ends dev with exit code 0 and a summary, not a
// "context deadline exceeded".
func TestDevExitAfterIsNotAnError(t *testing.T) {
	t.Parallel()
	out, done := runDevCmd(context.Background(), "--jobs", "100000", "--exit-after", "200ms")
	if code := exitCode(t, done, out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	text := out.String()
	for _, want := range []string{"stopping after 200ms (--exit-after)", "demo jobs enqueued", "pending "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "deadline") {
		t.Errorf("output reports the time limit as an error:\n%s", text)
	}
}

func TestDevRefusesNegativeFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--jobs", "-1"}, {"--exit-after", "-1s"}} {
		code, _, errOut := runWith(append([]string{"dev"}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) {
			t.Errorf("dev %v: exit %d, %q; want 2 naming the flag", args, code, errOut)
		}
	}
}

// The counter's columns stay put from line to line: every number has the
// width of the widest seen so far, and a number never runs into the next
// label.
func TestCounterColumns(t *testing.T) {
	t.Parallel()
	c := &counter{width: 4}
	small := broker.Counts{Pending: 3, Running: 4, Done: 17}
	big := broker.Counts{Pending: 1_234_567, Scheduled: 12, Blocked: 2, Running: 4, Done: 98_765, Dead: 3, Cancelled: 1}
	if got, want := c.line(small), "pending    3  scheduled    0  blocked    0  running    4  done   17  dead    0  cancelled    0"; got != want {
		t.Errorf("small counts:\n got %q\nwant %q", got, want)
	}
	wide := c.line(big)
	if want := "pending 1234567  scheduled      12  blocked       2  running       4  done   98765  dead       3  cancelled       1"; wide != want {
		t.Errorf("large counts:\n got %q\nwant %q", wide, want)
	}
	after := c.line(small) // the width does not shrink back
	labels := regexp.MustCompile(`[a-z]+`)
	if a, b := labels.FindAllStringIndex(wide, -1), labels.FindAllStringIndex(after, -1); len(a) != 7 || len(b) != 7 || len(wide) != len(after) {
		t.Fatalf("lines differ in shape:\n%q\n%q", wide, after)
	} else {
		for i := range a {
			if a[i][0] != b[i][0] {
				t.Errorf("label %q starts at column %d with large counts, %d on the next line", wide[a[i][0]:a[i][1]], a[i][0], b[i][0])
			}
		}
	}
}

// dev records the demo queue's events and enqueues jobs that wait for
// others, as the README's tour promises; its summary says how many jobs
// ended done and dead, and the rate.
func TestDevEventsDependenciesAndSummary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := runDevCmd(ctx, "--jobs", "5")
	url := regexp.MustCompile(`redis://\S+`).FindString(out.wait(t, "embedded Redis at"))
	out.wait(t, "workerd dev: events on ('inspect demo --follow' shows them); 4 jobs blocked until another is done")
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(url, "redis://")})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.Inspector().EventsKept(ctx, devQueue); err != nil || n != devEvents {
		t.Fatalf("events kept %d (%v); want %d", n, err, devEvents)
	}
	// Every dependent ends: the greetings done after their resize, the one
	// after a job that dies cancelled.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends := map[broker.State]int{}
		for _, st := range []broker.State{broker.StateDone, broker.StateCancelled} {
			js, err := b.Inspector().Jobs(ctx, devQueue, st, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range js {
				if strings.HasPrefix(j.ID, "flow-") && (strings.HasSuffix(j.ID, "-greet") || strings.HasSuffix(j.ID, "-after")) {
					ends[st]++
				}
			}
		}
		if ends[broker.StateDone] == devFlows && ends[broker.StateCancelled] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dependent jobs ended %v; want %d done and 1 cancelled", ends, devFlows)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if code := exitCode(t, done, out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	m := regexp.MustCompile(`stopped after (\S+); \d+ demo jobs enqueued; (\d+) done, (\d+) dead, ([0-9.]+) jobs done per second\n`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary with done, dead and the rate:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(m[2]); n < devFlows*2 {
		t.Errorf("summary: %s done; at least the %d jobs of the flows were:\n%s", m[2], devFlows*2, out.String())
	}
	if n, _ := strconv.Atoi(m[3]); n < 1 {
		t.Errorf("summary: %s dead; the flow's parent that dies did:\n%s", m[3], out.String())
	}
}
