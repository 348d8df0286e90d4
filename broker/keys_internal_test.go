package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// The scripts name only keys that keys.go defines: K.<name> one of
// queueKeyNames, derived('<kind>', …) one of derivedKinds.
func TestScriptsUseDefinedKeys(t *testing.T) {
	fixed := regexp.MustCompile(`\bK\.([a-z0-9_]+)`)
	derived := regexp.MustCompile(`derived\('([a-z_]+)'`)
	files, err := lua.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := lua.FS.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fixed.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(queueKeyNames, m[1]) {
				t.Errorf("%s uses K.%s, which keys.go does not define", f.Name(), m[1])
			}
		}
		for _, m := range derived.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(derivedKinds, m[1]) {
				t.Errorf("%s derives a %q key, a kind keys.go does not define", f.Name(), m[1])
			}
		}
	}
}

// The Lua that scriptKeys writes builds the very names queueKeys builds.
func TestScriptKeysMatchGo(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	k := b.queueKeys("q")
	src := scriptKeys() + `
begin_keys(ARGV[1])
local out = {JOB}
for _, name in ipairs(ARGV) do
  if name ~= BASE then
    table.insert(out, KEY_NAMES[name] and K[name] or derived(name, 'x'))
  end
end
if pcall(function() return K['job'] end) then
  return 'K.job is not a queue key: it must be an error'
end
return out`
	args := []any{k.base}
	for _, name := range queueKeyNames {
		args = append(args, name)
	}
	for _, kind := range derivedKinds {
		args = append(args, kind+"-kind") // not a fixed key's name
	}
	got, err := redis.NewScript(src).Run(context.Background(), rdb, k.list, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{k.job}, k.list...)
	for _, kind := range derivedKinds {
		want = append(want, k.derived(kind+"-kind", "x"))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Lua built\n%q\nGo built\n%q", got, want)
	}
}

// Reading many distinct queue names (a dashboard's visitors, an API's
// callers) keeps at most twice queueKeysCached queues' keys in memory, and
// a queue in use keeps its keys, registered flag included, meanwhile.
func TestQueueKeysBounded(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, Job{Queue: "hot", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	hot := b.queueKeys("hot")
	if !hot.registered.Load() {
		t.Fatal("an enqueue did not register its queue")
	}
	const bound = 2 * queueKeysCached
	for i := range 3 * bound {
		if _, err := b.Inspector().Limits(ctx, fmt.Sprintf("name-%d", i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			if _, err := b.Client().Enqueue(ctx, Job{Queue: "hot", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := cachedQueues(b); n > bound {
		t.Errorf("after %d distinct names read, the broker keeps the keys of %d queues; want at most %d", 3*bound, n, bound)
	}
	if b.queueKeys("hot") != hot {
		t.Error("a queue used all along lost its cached keys (and its registered flag) to names read once")
	}
}

// cachedQueues counts the queues whose keys b holds, in both generations.
func cachedQueues(b *Broker) int {
	b.keys.mu.Lock()
	defer b.keys.mu.Unlock()
	n := len(b.keys.old)
	b.keys.cur.Range(func(name, _ any) bool {
		if b.keys.old[name.(string)] == nil {
			n++
		}
		return true
	})
	return n
}

// QueueExists answers what Queues lists, and refuses a name no queue has.
func TestQueueExists(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, Job{Queue: "mail", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]bool{"mail": true, "nope": false} {
		if ok, err := b.Inspector().QueueExists(ctx, q); err != nil || ok != want {
			t.Errorf("QueueExists(%q) = %v, %v; want %v", q, ok, err, want)
		}
	}
	var ve *ValidationError
	if _, err := b.Inspector().QueueExists(ctx, "a{b}"); !errors.As(err, &ve) {
		t.Errorf("QueueExists of a name with braces: %v, want a *ValidationError", err)
	}
}
