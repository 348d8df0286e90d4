package dashboard

import (
	"strings"
	"testing"
	"time"
)

func TestThroughputChart(t *testing.T) {
	start := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	ms := make([]minute, 60)
	for i := range ms {
		ms[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	ms[10].Done, ms[11].Done, ms[11].Failed, ms[59].Done = 5, 20, 3, 1
	cv := throughputChart(ms)
	svg := string(cv.SVG)
	if got := strings.Count(svg, `fill="#2f855a"`); got != 3 {
		t.Errorf("%d done bars, want 3 (one per minute with jobs done)", got)
	}
	if got := strings.Count(svg, `fill="#c53030"`); got != 1 {
		t.Errorf("%d failed bars, want 1", got)
	}
	for _, want := range []string{"01:11: 20 done", "01:11: 3 failed", "26 done, 3 failed"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if cv.From != "01:00" || cv.To != "01:59" || cv.PeakDone != 20 || cv.PeakFailed != 3 || cv.Done != 26 || cv.Failed != 3 {
		t.Errorf("chart labels %+v", cv)
	}
	quiet := throughputChart(make([]minute, 180))
	if strings.Contains(string(quiet.SVG), "<rect") || quiet.Done != 0 {
		t.Errorf("a quiet queue's chart has bars:\n%s", quiet.SVG)
	}
}
