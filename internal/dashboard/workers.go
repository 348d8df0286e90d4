package dashboard

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// workersView is the workers page: the live pools of the registry.
type workersView struct {
	Workers []workerRow
	Jobs    int       // running jobs, all pools
	Slots   int       // their concurrency, all pools
	Now     time.Time // the Redis clock when the registry was read
}

// Since is how long ago t was, on the Redis clock.
func (v workersView) Since(t time.Time) time.Duration { return v.Now.Sub(t) }

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

// JobsHidden is how many of its running jobs its entry does not list.
func (w workerRow) JobsHidden() int { return w.Running - len(w.Jobs) }

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
	v := workersView{Now: ws.Now}
	for _, wi := range ws.Workers {
		row := workerRow{WorkerInfo: wi, Up: ws.Now.Sub(wi.StartedAt), SeenAgo: ws.Now.Sub(wi.SeenAt)}
		row.Expiring = row.SeenAgo > wi.ExpiresAt.Sub(wi.SeenAt)/2
		v.Workers = append(v.Workers, row)
		v.Jobs += wi.Running
		v.Slots += wi.Concurrency
	}
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
