package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fenceq/fenceq/broker"
)

// shownMax is how much of a payload, result or error a page shows.
const shownMax = 64 << 10

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"queueURL": queueURL, "leasesURL": leasesURL, "groupsURL": groupsURL, "groupJobsURL": groupJobsURL, "groupFindURL": groupFindURL, "jobURL": jobURL, "releaseURL": releaseURL, "deleteURL": deleteURL,
		"count": count, "age": age, "when": when, "clip": clip, "lastError": lastError,
		"int64":         func(n int) int64 { return int64(n) },
		"ago":           func(s string) string { return strings.TrimPrefix(s, "-") },
		"workerAnchor":  workerAnchor,
		"maxWorkerJobs": func() int { return broker.MaxWorkerJobs },
		"rows": func(l []leaseRow, s session, queue string) leaseRows {
			return leaseRows{L: l, S: s, Queue: queue}
		},
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "queue", "job", "leases", "groups", "release", "confirm", "login", "error", "workers", "schedules", "schedule_remove"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse the %s page: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// leaseRows is what the leases table template takes.
type leaseRows struct {
	L     []leaseRow
	S     session
	Queue string
}

// count writes a number with thousands separators: 1,234,567.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// age writes a duration the way a person reads one: 950ms, 12s, 3m 05s,
// 2h 10m, 3d 4h.
func age(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		s = fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		s = fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "-" + s
	}
	return s
}

// when writes a time in UTC to the second, or a dash for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// clip shortens text for a table cell.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// errorShown bounds the last error a job's page shows in its box, which
// the live refresh rewrites: the refresh reads the first
// broker.ListedErrorBytes of the error, cut at a character boundary (up to
// utf8.UTFMax-1 bytes fewer), so both cut the error at this length to
// the same text. The page shows the whole error below the box.
const errorShown = broker.ListedErrorBytes - utf8.UTFMax

// lastError is a job's last error as the box of its page shows it, both
// when the page is rendered and at each live refresh: "—" for none.
func lastError(s string) string {
	if s == "" {
		return "—"
	}
	return cut(s, errorShown)
}

// echoMax bounds the bytes of a value a user sent that a message or a log
// line repeats, so that neither grows with what was sent.
const echoMax = 100

// cut shortens s to at most n bytes (and a "…"), cutting no character in
// two: for values sent in, whose length only the sender bounds.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s + "…"
}

// logMax bounds the bytes of one value a log line carries.
const logMax = 200

// logged is a log attribute of a value a request sent (or a message that
// repeats one), cut to logMax bytes: a client that sends 64 KB values
// writes short lines.
func logged(key, v string) slog.Attr { return slog.String(key, cut(v, logMax)) }

// shown is a payload, result or progress as a page shows it: JSON indented,
// anything else as text, invalid UTF-8 replaced, and at most shownMax
// bytes.
type shown struct {
	Text    string
	JSON    bool
	Size    int
	Clipped bool
}

func show(b []byte) shown {
	out := shown{Size: len(b)}
	if len(b) == 0 {
		return out
	}
	var buf bytes.Buffer
	if json.Valid(b) && json.Indent(&buf, b, "", "  ") == nil {
		out.JSON, b = true, buf.Bytes()
	}
	if len(b) > shownMax {
		b, out.Clipped = b[:shownMax], true
	}
	out.Text = strings.ToValidUTF8(string(b), "\uFFFD")
	return out
}
