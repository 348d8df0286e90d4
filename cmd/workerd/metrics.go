package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/metrics"
	"github.com/fenceq/fenceq/worker"
)

// workerdMetrics is what /metrics serves: fenceq's collector (package
// metrics) and the Go runtime's and process's, on a registry of its own.
// It holds the pools run started, for the collector and for shutdown.
type workerdMetrics struct {
	reg   *prometheus.Registry
	c     *metrics.Collector
	pools []*worker.Pool
}

func newMetrics(b *broker.Broker, queues []string) *workerdMetrics {
	var r metrics.Reader
	if b != nil {
		r = b.Inspector()
	}
	m := &workerdMetrics{reg: prometheus.NewRegistry(), c: metrics.New(r, queues...)}
	m.reg.MustRegister(m.c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// addPool adds a started pool to the metrics and to the pools shut down.
func (m *workerdMetrics) addPool(p *worker.Pool) {
	m.pools = append(m.pools, p)
	m.c.AddPool(p)
}
