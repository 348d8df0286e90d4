package broker

// Inspector is what an operator, a dashboard or a diagnostic needs: read
// jobs, queues, counts, events and memory; pause, resume and limit a queue;
// cancel, retry, release, delete, purge and promote jobs; check a queue's
// invariants; list the live worker pools and find the one holding a job;
// keep the dashboard's sign-in sessions. Reach it as Broker.Inspector; it shares the
// Broker's connection and is safe for concurrent use.
type Inspector struct{ *core }

// Prefix is the key prefix in use, as Broker.Prefix.
func (in *Inspector) Prefix() string { return in.opts.Prefix }
