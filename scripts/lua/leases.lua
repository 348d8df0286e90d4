-- leases: list running jobs' leases, soonest expiry first, up to a score:
-- Redis's own now (expired leases no reaper has taken yet: what an operator
-- checks after a deploy) or +inf (all of them). Read-only; it runs as a
-- script only to read the clock of the server that holds the queue.
-- Bounded by n (invariant 8): Broker.Leases reads a long listing in steps,
-- each just after the lease the one before read last (lib.lua's
-- rank_after: a rank is found in O(log N), where an offset into a score
-- range would walk it), so leases that ended meanwhile hide none that stayed.
-- ARGV[2] 'expired' or 'all'  [3] the last lease read: its lease_until, ''
--     from the head  [4] its id  [5] n
-- Reply: {now, (id, lease_until as the index holds it, kind, attempt, gen) * ...}
local now = now_ms()
local out = {now}
local first, n = 0, tonumber(ARGV[5])
if ARGV[3] ~= '' then
  first = rank_after(K.leases, ARGV[3], ARGV[4])
end
local last
if ARGV[2] == 'expired' then
  last = redis.call('ZCOUNT', K.leases, '-inf', now) - 1
else
  last = redis.call('ZCARD', K.leases) - 1
end
last = math.min(last, first + n - 1)
if last < first then
  return out
end
local ids = redis.call('ZRANGE', K.leases, first, last, 'WITHSCORES')
for i = 1, #ids, 2 do
  local f = read(JOB .. ids[i], F.kind, F.attempt, F.gen)
  f = f or {}
  for _, v in ipairs({ids[i], ids[i + 1], f[1] or '', tonumber(f[2]) or 0, tonumber(f[3]) or 0}) do
    table.insert(out, v)
  end
end
return out
