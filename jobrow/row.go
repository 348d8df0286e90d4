package jobrow

// Row is what every view of a job holds: where it is, what it is, and
// which claim of it this is.
type Row struct {
	Queue       string            // the queue the job is in
	ID          string            // the job's id, unique within its queue
	Kind        string            // what the job is; it selects the handler
	Payload     []byte            // the job's arguments as enqueued, opaque to fenceq
	Attempt     int               // 1 for the first run; 0 before the job is first claimed
	MaxAttempts int               // claims allowed in all, the default applied: a failure of the last is dead
	Generation  int64             // raised by every claim, release and reap; with ID, a claim's fencing token
	Metadata    map[string]string // the job's small string headers (broker.Job.Metadata); nil when it has none
	Group       string            // the group the job belongs to, such as a tenant id (broker.Job.Group); "" when the job has none
}
