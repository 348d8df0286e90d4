package broker

// State is where a job is in its life.
type State string

const (
	StateBlocked   State = "blocked"   // waiting for the jobs it depends on to be done
	StateScheduled State = "scheduled" // waiting for its run_at (a delay or a retry backoff)
	StatePending   State = "pending"   // ready to be claimed
	StateRunning   State = "running"   // claimed; a lease is held
	StateDone      State = "done"      // the handler succeeded
	StateDead      State = "dead"      // attempts spent, a permanent error, or a corrupt job hash
	StateCancelled State = "cancelled" // cancelled before it finished
)

// States lists every state, in the order a job normally passes through them.
var States = []State{StateBlocked, StateScheduled, StatePending, StateRunning, StateDone, StateDead, StateCancelled}

// Final reports whether no operation but ReleaseUnowned's generation bump
// changes a job in this state any more.
func (s State) Final() bool {
	return s == StateDone || s == StateDead || s == StateCancelled
}

func (s State) valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Outcome is the answer of a guarded operation (Renew, Progress, Ack, Fail,
// Snooze, Release).
type Outcome int

const (
	// OK: the claim was valid and the operation took effect.
	OK Outcome = iota
	// Stale: the claim is no longer valid (released, reaped or superseded);
	// nothing changed. A worker logs it and moves on: it is never an error.
	Stale
	// CancelRequested (Renew only): the lease was extended, but the job's
	// cancellation was requested; the handler should stop.
	CancelRequested
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Stale:
		return "stale"
	case CancelRequested:
		return "cancel requested"
	}
	return "unknown"
}
