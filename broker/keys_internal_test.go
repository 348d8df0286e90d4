package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
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
	b, rdb := miniBroker(t)
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
	b, _ := miniBroker(t)
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
	b, _ := miniBroker(t)
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

// lib.lua and the scripts declare no key of their own: every key name
// they use comes from the preamble scriptKeys writes (K, INDEX, LEGACY_READY,
// JOB, derived), so a key name is defined once, in keys.go.
func TestScriptsDeclareNoKeys(t *testing.T) {
	own := regexp.MustCompile(`BASE\s*\.\.|\bINDEX_NAME\b|\bKEY_NAMES\b|\blocal\s+(K|INDEX|LEGACY_READY|JOB)\b|\b(K|INDEX|LEGACY_READY|JOB)\s*=[^=]`)
	files, err := lua.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := lua.FS.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if m := own.FindString(code); m != "" {
				t.Errorf("%s:%d defines a key of its own (%q); keys.go's scriptKeys is the one definition", f.Name(), i+1, m)
			}
		}
	}
}

// The preamble's INDEX names, for each state, the key Go's index names
// (pendingIndex for StatePending), and legacyReady's key as LEGACY_READY.
func TestScriptIndexMatchesGo(t *testing.T) {
	b, rdb := miniBroker(t)
	k := b.queueKeys("q")
	src := scriptKeys() + `
begin_keys(ARGV[1])
local out = {LEGACY_READY}
for i = 2, #ARGV do
  table.insert(out, INDEX[ARGV[i]] or '')
end
table.insert(out, INDEX['no-such-state'] or 'nil')
return out`
	args := []any{k.base}
	want := []string{k.legacy()}
	for _, s := range States {
		args = append(args, string(s))
		if s == StatePending {
			want = append(want, k.key(pendingIndex))
		} else {
			want = append(want, k.index(s))
		}
	}
	want = append(want, "nil")
	got, err := redis.NewScript(src).Run(context.Background(), rdb, k.list, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Lua's INDEX\n%q\nGo's index\n%q", got, want)
	}
}

// Each accessor builds the key of its name in queueKeyNames.
func TestQueueKeyAccessors(t *testing.T) {
	k := &queueKeys{base: "p:{q}:"}
	got := []string{k.ready0(), k.scheduled(), k.leases(), k.dead(), k.done(), k.cancelled(), k.wake(), k.seq(),
		k.paused(), k.limits(), k.starts(), k.events(), k.blocked(), k.gen(), k.cascade(), k.stats(), k.readyHi(), k.readyLo(),
		k.grotation(), k.gwait(), k.grunning(), k.glimits(), k.ghold()}
	var want []string
	for _, name := range queueKeyNames {
		want = append(want, k.key(name))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("accessors build\n%q\nqueueKeyNames give\n%q", got, want)
	}
	if k.legacy() != k.key(legacyReady) {
		t.Errorf("legacy() = %q, want %q", k.legacy(), k.key(legacyReady))
	}
}

// miniBroker is a Broker with prefix "p" over a fresh miniredis, and its client.
func miniBroker(t *testing.T) (*Broker, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	return b, rdb
}

// A lease ends in one way: lib.lua's lease_end, which frees its group's
// slot with it (invariant 11), or a batch's zrem_all followed at once by
// group_free. Any other removal from the leases index must say, on its
// line, why it is no lease ("-- not a lease"): an entry whose hash is not
// running was never counted.
func TestLeasesEndOnlyThroughLeaseEnd(t *testing.T) {
	removal := regexp.MustCompile(`'ZREM',\s*K\.leases|zrem_all\(K\.leases`)
	files, err := lua.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		src, err := lua.FS.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(src), "\n")
		fn := ""
		for i, line := range lines {
			if m := regexp.MustCompile(`^local function (\w+)`).FindStringSubmatch(line); m != nil {
				fn = m[1]
			}
			code, comment, _ := strings.Cut(line, "--")
			if !removal.MatchString(code) {
				continue
			}
			found++
			next := ""
			if i+1 < len(lines) {
				next = lines[i+1]
			}
			switch {
			case f.Name() == "lib.lua" && fn == "lease_end":
			case strings.HasPrefix(strings.TrimSpace(code), "zrem_all(") && strings.Contains(next, "group_free("):
			case strings.Contains(comment, "not a lease"):
			default:
				t.Errorf("%s:%d removes a lease other than through lease_end, so its group's slot would not be freed: %s", f.Name(), i+1, strings.TrimSpace(line))
			}
		}
	}
	if found < 3 {
		t.Errorf("found %d removals from the leases index; the scan no longer sees them", found)
	}
}
