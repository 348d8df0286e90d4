package worker

import (
	"testing"
	"time"
)

// SetAbandonAfter shortens how long Shutdown waits for handlers that ignore
// their cancelled context, until t ends. Tests that call it must not run in
// parallel with other pools.
func SetAbandonAfter(t testing.TB, d time.Duration) {
	old := abandonAfter
	abandonAfter = d
	t.Cleanup(func() { abandonAfter = old })
}

// Halted is closed when Shutdown gives up retrying Redis (test only).
func Halted(p *Pool) <-chan struct{} { return p.sig.halt.Done() }
