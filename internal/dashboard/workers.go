package dashboard

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// workerJobsShown bounds the running jobs the workers page lists, of all
// pools together (each pool's entry lists up to broker.MaxWorkerJobs).
const workerJobsShown = 500

// workersView is the workers page: the live pools of the registry.
type workersView struct {
	Workers  []workerRow
	Jobs     int // running jobs, all pools
	Slots    int // their concurrency, all pools
	JobRows  []workerJob
	JobsMore int // running jobs not in JobRows
	// Indexed is the pools the registry held, when more than a listing
	// reads (broker.MaxWorkersListed); 0 when Workers is all of them.
	Indexed int64
}

// workerJob is one running job on the workers page.
type workerJob struct {
	broker.RunningJob
	Pool       *workerRow
	RunningFor time.Duration
}

// workerRow is one pool on the workers page.
type workerRow struct {
	broker.WorkerInfo
	Up       time.Duration // since it started, Redis clock
	SeenAgo  time.Duration // since its last refresh
	Expiring bool          // its entry is past due: the pool may be gone
}

// Label is how the pages name a pool: its name, or its queues.
func (w workerRow) Label() string { return workerLabel(w.WorkerInfo) }

// QueuesText is the pool's queues, with how many it leaves out.
func (w workerRow) QueuesText() string {
	s := strings.Join(w.Queues, ", ")
	if more := w.QueueCount - len(w.Queues); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

func workerLabel(w broker.WorkerInfo) string {
	if w.Name != "" {
		return w.Name
	}
	return strings.Join(w.Queues, ", ")
}

// workerURL is a pool's row on the workers page.
func workerURL(id string) string { return Mount + "workers#" + workerAnchor(id) }

func workerAnchor(id string) string { return "w-" + id }

func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	ws, err := s.in.Workers(ctx)
	if err != nil {
		s.failErr(w, r, "read the worker registry", err)
		return
	}
	var v workersView
	if ws.Truncated() {
		v.Indexed = ws.Indexed
	}
	v.Workers = make([]workerRow, len(ws.Workers))
	for i, wi := range ws.Workers {
		row := &v.Workers[i]
		*row = workerRow{WorkerInfo: wi, Up: ws.Now.Sub(wi.StartedAt), SeenAgo: ws.Now.Sub(wi.SeenAt)}
		row.Expiring = row.SeenAgo > wi.ExpiresAt.Sub(wi.SeenAt)/2
		v.Jobs += wi.Running
		v.Slots += wi.Concurrency
		for _, j := range wi.Jobs {
			v.JobRows = append(v.JobRows, workerJob{RunningJob: j, Pool: row, RunningFor: ws.Now.Sub(j.Since)})
		}
	}
	// The longest-running first, whichever pool runs them.
	slices.SortStableFunc(v.JobRows, func(a, b workerJob) int { return a.Since.Compare(b.Since) })
	if len(v.JobRows) > workerJobsShown {
		v.JobRows = v.JobRows[:workerJobsShown]
	}
	v.JobsMore = v.Jobs - len(v.JobRows)
	s.render(w, r, http.StatusOK, "workers", page{Title: "Workers", Data: v})
}

// holderView is the pool that holds a lease, as a lease's row and a job's
// page show it.
type holderView struct {
	Worker     broker.WorkerInfo
	RunningFor time.Duration // since the claim, Redis clock
}

// Who names the pool: host, pid and label.
func (h holderView) Who() string {
	return fmt.Sprintf("%s pid %d (%s)", h.Worker.Host, h.Worker.PID, workerLabel(h.Worker))
}

// URL is the pool's row on the workers page.
func (h holderView) URL() string { return workerURL(h.Worker.ID) }

// holderOf finds the pool holding the lease of generation gen on job id,
// with now the Redis clock: nil when no live pool lists it.
func holderOf(ws broker.WorkerList, queue, id string, gen int64, now time.Time) *holderView {
	w, j, ok := ws.Holder(queue, id, gen)
	if !ok {
		return nil
	}
	return &holderView{Worker: w, RunningFor: now.Sub(j.Since)}
}
