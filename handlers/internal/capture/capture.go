// Package capture keeps a bounded part of a stream that the exec and
// webhook adapters turn into a job's result: a command's standard output, a
// response body. It exists so both cut a result the same way.
package capture

const (
	// ResultLimit caps a result taken from a command's output or a response
	// body: it is stored in Redis with the job.
	ResultLimit = 1 << 20
	// truncatedMark ends a result that the limit cut, so nobody mistakes it
	// for the whole output.
	truncatedMark = "\n[truncated]"
)

// Head keeps the first limit bytes written to it. It accepts and drops the
// rest rather than failing, so a writer is never blocked by it.
type Head struct {
	limit int
	buf   []byte
	cut   bool
}

// NewHead returns a Head that keeps limit bytes.
func NewHead(limit int) *Head { return &Head{limit: limit} }

func (b *Head) Write(p []byte) (int, error) {
	room := b.limit - len(b.buf)
	if len(p) > room {
		b.cut = true
	}
	if room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes is what was kept. When more was written, its end is replaced by
// "[truncated]", so the result stays within the limit.
func (b *Head) Bytes() []byte {
	if !b.cut {
		return b.buf
	}
	keep := max(len(b.buf)-len(truncatedMark), 0)
	return append(b.buf[:keep:keep], truncatedMark...)
}
