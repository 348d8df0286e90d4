// Package bench is the harness behind `workerd bench`: it measures
// throughput, round trips per job, pickup latency and memory per job on one
// Redis server, or soaks a pool for a while and follows Redis's memory and
// CPU. It writes only keys under its Config's Prefix and deletes them:
// New(ctx, cfg).Run(opts), then DeleteOnExit however Run ended.
package bench
