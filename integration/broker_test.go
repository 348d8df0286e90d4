package integration

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/internal/brokertest"
)

// TestBrokerRealRedis runs the broker conformance suite on a real server,
// whose clock moves on its own: Advance sleeps.
func TestBrokerRealRedis(t *testing.T) {
	brokertest.Run(t, func(t testing.TB) brokertest.Backend {
		return brokertest.Backend{Client: client(t), Advance: time.Sleep}
	})
}
