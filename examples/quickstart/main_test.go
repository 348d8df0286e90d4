package main

import "testing"

// -redis takes host:port and the URL `workerd dev` prints.
func TestRedisOptions(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:6379":           "127.0.0.1:6379",
		"redis://127.0.0.1:40123":  "127.0.0.1:40123",
		"redis://:pw@h.example:7/": "h.example:7",
	} {
		opt, err := redisOptions(in)
		if err != nil || opt.Addr != want {
			t.Errorf("redisOptions(%q) = %+v, %v; want address %s", in, opt, err, want)
		}
	}
	if opt, err := redisOptions("redis://h:1/3"); err != nil || opt.DB != 3 {
		t.Errorf("a URL's db: %+v, %v", opt, err)
	}
	if _, err := redisOptions("redis://h:1/notadb"); err == nil {
		t.Error("a bad URL was accepted")
	}
}
