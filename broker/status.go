package broker

import "fmt"

// status is the first value of a script's reply about one job, or of each
// item of a batch script's reply: the scripts answer numbers, and the broker
// never reads a script's error text. The codes are lib.lua's STATUS table;
// TestStatusCodesAgree checks that the two lists match.
type status int64

const (
	statusOK           status = 0  // the operation took effect, or answers what it read
	statusStale        status = 1  // the claim is no longer valid; nothing changed
	statusCancel       status = 2  // renew: extended, but the job's cancellation was requested
	statusMissing      status = 3  // no such job
	statusCorrupt      status = 4  // the job key holds no usable job; payload: why
	statusExists       status = 5  // enqueue: the id is taken; payload: the job's state
	statusUniqueHeld   status = 6  // enqueue: the unique key is held; payload: holder id, its state
	statusNoDependency status = 7  // enqueue: a dependency does not exist; payload: its id
	statusRefused      status = 8  // retry: the job cannot go back as enqueue would let it in; payload: why
	statusNotRetryable status = 9  // retry: the job is neither dead nor cancelled
	statusWaiting      status = 10 // wait: the job has not finished; the caller is registered
	statusWrongState   status = 11 // delete, promote, release_unowned: the job's state is not one the operation takes; payload: that state
)

// statusNames are the codes' names in lib.lua's STATUS table.
var statusNames = map[status]string{
	statusOK: "ok", statusStale: "stale", statusCancel: "cancel", statusMissing: "missing",
	statusCorrupt: "corrupt", statusExists: "exists", statusUniqueHeld: "unique_held",
	statusNoDependency: "no_dependency", statusRefused: "refused", statusNotRetryable: "not_retryable",
	statusWaiting: "waiting", statusWrongState: "wrong_state",
}

func (s status) String() string {
	if name, ok := statusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("status %d", int64(s))
}
