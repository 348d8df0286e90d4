package capture

import (
	"bytes"
	"testing"
)

func TestHeadKeepsWhatFits(t *testing.T) {
	t.Parallel()
	h := NewHead(16)
	for _, p := range []string{"hello, ", "world"} {
		if n, err := h.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", p, n, err, len(p))
		}
	}
	if got := string(h.Bytes()); got != "hello, world" {
		t.Fatalf("Bytes() = %q, want %q", got, "hello, world")
	}
}

func TestHeadMarksWhatItCut(t *testing.T) {
	t.Parallel()
	const limit = 32
	h := NewHead(limit)
	// A writer is never refused, even far past the limit.
	for range 10 {
		if n, err := h.Write(bytes.Repeat([]byte("x"), 10)); n != 10 || err != nil {
			t.Fatalf("Write = %d, %v; want 10, nil", n, err)
		}
	}
	got := h.Bytes()
	if len(got) != limit || !bytes.HasSuffix(got, []byte(truncatedMark)) {
		t.Fatalf("Bytes() = %q (%d bytes); want %d bytes ending in %q", got, len(got), limit, truncatedMark)
	}
}

func TestHeadExactlyFull(t *testing.T) {
	t.Parallel()
	// Filling the limit exactly is not a cut: nothing was dropped.
	h := NewHead(4)
	h.Write([]byte("abcd"))
	if got := string(h.Bytes()); got != "abcd" {
		t.Fatalf("Bytes() = %q, want %q", got, "abcd")
	}
}
