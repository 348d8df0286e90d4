package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// minute is one minute of a queue's throughput.
type minute struct {
	Start        time.Time
	Done, Failed int64
}

// chartMinutes is how far back the overview's throughput chart goes.
const chartMinutes = 180

// Chart geometry, in the SVG's own units. The SVG stretches to its box, so
// it holds bars only: the labels are HTML beside it, and never stretch.
const chartW, chartH = 720, 100

// chartView is a queue's throughput chart: the SVG and its labels.
type chartView struct {
	SVG                  template.HTML
	From, To             string // the first and last minute, UTC
	PeakDone, PeakFailed int64  // the busiest minute's figures
	Done, Failed         int64  // over the whole chart
	Msg                  string // why there is no chart, when SVG is empty
}

// chart reads a queue's last chartMinutes minutes and draws them.
func (s *Server) chart(ctx context.Context, queue string) chartView {
	ms, err := s.in.Throughput(ctx, queue, chartMinutes)
	if err != nil {
		return chartView{Msg: "No throughput chart: " + err.Error()}
	}
	pts := make([]minute, len(ms))
	for i, m := range ms {
		pts[i] = minute{Start: m.Start, Done: m.Done, Failed: m.Failed}
	}
	return throughputChart(pts)
}

// throughputChart draws done (bars up, green) and failed (bars down, red)
// per minute, oldest left. The markup is built from numbers and fixed
// strings only.
func throughputChart(ms []minute) chartView {
	if len(ms) == 0 {
		return chartView{Msg: "No throughput chart: no minutes to show."}
	}
	cv := chartView{From: ms[0].Start.UTC().Format("15:04"), To: ms[len(ms)-1].Start.UTC().Format("15:04")}
	for _, m := range ms {
		cv.PeakDone, cv.PeakFailed = max(cv.PeakDone, m.Done), max(cv.PeakFailed, m.Failed)
		cv.Done, cv.Failed = cv.Done+m.Done, cv.Failed+m.Failed
	}
	// Done takes the top of the plot, failed the bottom, in proportion to
	// their peaks (failed at least a fifth when there are any).
	const plotH = chartH - 4
	upH := float64(plotH)
	if cv.PeakFailed > 0 {
		frac := max(0.2, min(0.5, float64(cv.PeakFailed)/float64(cv.PeakDone+cv.PeakFailed)))
		upH = plotH * (1 - frac)
	}
	axisY := 2 + upH
	barW := float64(chartW) / float64(len(ms))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="jobs per minute over %d minutes: %d done, %d failed">`,
		chartW, chartH, len(ms), cv.Done, cv.Failed)
	fmt.Fprintf(&b, `<line x1="0" y1="%.1f" x2="%d" y2="%.1f" stroke="#9aa5b1" stroke-width="1" vector-effect="non-scaling-stroke"/>`, axisY, chartW, axisY)
	for i, m := range ms {
		x := float64(i) * barW
		if m.Done > 0 {
			h := max(1, upH*float64(m.Done)/float64(cv.PeakDone))
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#2f855a"><title>%s: %d done</title></rect>`,
				x, axisY-h, max(barW*0.8, 0.5), h, m.Start.UTC().Format("15:04"), m.Done)
		}
		if m.Failed > 0 {
			h := max(1, (plotH-upH)*float64(m.Failed)/float64(cv.PeakFailed))
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#c53030"><title>%s: %d failed</title></rect>`,
				x, axisY, max(barW*0.8, 0.5), h, m.Start.UTC().Format("15:04"), m.Failed)
		}
	}
	b.WriteString(`</svg>`)
	cv.SVG = template.HTML(b.String()) // numbers and fixed strings only
	return cv
}
