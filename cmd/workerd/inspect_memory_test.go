package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// On a server that cannot measure memory (miniredis), inspect says
// "unknown" for it and works as before; the figures on a real server are
// checked in integration (TestWorkerdInspectMemory).
func TestInspectMemoryUnknown(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome", "--payload", `{"to":"ada"}`)

	var all struct {
		Queues []map[string]any `json:"queues"`
	}
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	q := all.Queues[0]
	if q["memory"] != "unknown" || q["bytes_per_job"] != nil || q["footprint_bytes"] != nil || q["index_entry_bytes"] != nil {
		t.Fatalf("inspect --json on miniredis: %v; want memory unknown and null byte figures", q)
	}
	if _, ok := q["bytes_per_job"]; !ok {
		t.Fatalf("inspect --json lacks bytes_per_job: %v", q)
	}
	table := c.ok("", "inspect")
	if !strings.Contains(table, "BYTES/JOB") || !strings.Contains(table, "unknown") || !strings.Contains(table, "memory unknown") {
		t.Fatalf("inspect table:\n%s", table)
	}
	if one := c.ok("", "inspect", "mail"); !strings.Contains(one, "memory: unknown") {
		t.Fatalf("inspect mail:\n%s", one)
	}
}
