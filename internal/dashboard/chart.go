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

// Chart geometry, in the SVG's own units; the SVG scales to its box.
const (
	chartW, chartH         = 720, 160
	padL, padR, padT, padB = 44, 8, 10, 22
)

// throughputSVG draws done (bars up) and failed (bars down, red) per
// minute, oldest left, with the largest minute's figure on the axis. The
// markup is built from numbers and fixed strings only.
func throughputSVG(ms []minute) template.HTML {
	if len(ms) == 0 {
		return ""
	}
	var peakDone, peakFailed, total, failed int64
	for _, m := range ms {
		peakDone, peakFailed = max(peakDone, m.Done), max(peakFailed, m.Failed)
		total, failed = total+m.Done, failed+m.Failed
	}
	plotH := float64(chartH - padT - padB)
	// Done takes the top of the plot, failed the bottom, in proportion to
	// their peaks (failed at least a fifth when there are any).
	upH := plotH
	if peakFailed > 0 {
		frac := max(0.2, min(0.5, float64(peakFailed)/float64(peakDone+peakFailed)))
		upH = plotH * (1 - frac)
	}
	axisY := float64(padT) + upH
	barW := float64(chartW-padL-padR) / float64(len(ms))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="done and failed jobs per minute, last %d minutes: %d done, %d failed" preserveAspectRatio="none">`,
		chartW, chartH, len(ms), total, failed)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#9aa5b1" stroke-width="1"/>`, padL, axisY, chartW-padR, axisY)
	for i, m := range ms {
		x := float64(padL) + float64(i)*barW
		if m.Done > 0 && peakDone > 0 {
			h := max(1, upH*float64(m.Done)/float64(peakDone))
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#2f855a"><title>%s: %d done</title></rect>`,
				x, axisY-h, max(barW-0.5, 0.5), h, m.Start.UTC().Format("15:04"), m.Done)
		}
		if m.Failed > 0 {
			h := max(1, (plotH-upH)*float64(m.Failed)/float64(peakFailed))
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#c53030"><title>%s: %d failed</title></rect>`,
				x, axisY, max(barW-0.5, 0.5), h, m.Start.UTC().Format("15:04"), m.Failed)
		}
	}
	text := func(x, y float64, anchor, s string) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="11" fill="#52606d">%s</text>`, x, y, anchor, template.HTMLEscapeString(s))
	}
	text(padL-4, float64(padT)+9, "end", count(peakDone))
	if peakFailed > 0 {
		text(padL-4, float64(chartH-padB), "end", "-"+count(peakFailed))
	}
	text(padL-4, axisY+4, "end", "0")
	if total == 0 && failed == 0 {
		text(chartW/2, float64(padT)+upH/2, "middle", "nothing settled in these "+age(time.Duration(len(ms))*time.Minute))
	}
	text(float64(padL), chartH-6, "start", ms[0].Start.UTC().Format("15:04"))
	text(float64(chartW-padR), chartH-6, "end", ms[len(ms)-1].Start.UTC().Format("15:04")+" UTC")
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and escaped text only
}

// chartMinutes is how far back the overview's throughput chart goes.
const chartMinutes = 180

// chart is a queue's throughput chart for the overview, or why there is
// none.
func (s *Server) chart(ctx context.Context, queue string) (template.HTML, string) {
	ms, err := s.b.Throughput(ctx, queue, chartMinutes)
	if err != nil {
		return "", "No throughput chart: " + err.Error()
	}
	pts := make([]minute, len(ms))
	for i, m := range ms {
		pts[i] = minute{Start: m.Start, Done: m.Done, Failed: m.Failed}
	}
	return throughputSVG(pts), ""
}
