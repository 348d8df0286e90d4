//go:build unix

package exec

import (
	"fmt"
	"strings"
)

// stderrTail is how much of the end of standard error an error message
// keeps: the end is where a failing program says why. A command that
// succeeds has as much of the start and of the end of its standard error
// logged.
const stderrTail = 4 << 10

// stderrBuffer keeps the first stderrTail bytes of standard error,
// the last ones (in tail), and how many there were.
type stderrBuffer struct {
	head  []byte
	tail  tailBuffer
	total int64
}

func (b *stderrBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := stderrTail - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	return b.tail.Write(p)
}

// text is the whole of standard error when it was at most twice
// stderrTail, else its first and last stderrTail bytes with a
// note of how many were left out between them.
func (b *stderrBuffer) text() string {
	var s string
	if rest := b.total - int64(len(b.head)); rest <= stderrTail {
		s = string(b.head) + string(b.tail.last(int(rest)))
	} else {
		dropped := b.total - 2*stderrTail
		s = fmt.Sprintf("%s\n[... %d bytes left out ...]\n%s", b.head, dropped, b.tail.last(stderrTail))
	}
	return strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	limit int
	buf   []byte
	cut   bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	// Trim only once twice the limit has piled up, so each byte is copied
	// a bounded number of times.
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
		t.cut = true
	}
	return len(p), nil
}

// last is the last n bytes written, n at most limit.
func (t *tailBuffer) last(n int) []byte { return t.buf[len(t.buf)-n:] }

// String is the kept tail, without surrounding white space, starting with
// "..." when earlier output was dropped.
func (t *tailBuffer) String() string {
	b := t.buf
	cut := t.cut
	if len(b) > t.limit {
		b = b[len(b)-t.limit:]
		cut = true
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if cut && s != "" {
		s = "..." + s
	}
	return s
}
