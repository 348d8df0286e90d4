-- leases: list running jobs' leases, soonest expiry first, up to a score:
-- Redis's own now (expired leases no reaper has taken yet: what an operator
-- checks after a deploy) or +inf (all of them). Read-only; it runs as a
-- script only to read the clock of the server that holds the queue.
-- ARGV[2] 'expired' or 'all'  [3] limit
-- Reply: {now, (id, lease_until, kind, attempt, gen) * ...}
local now = now_ms()
local out = {now}
local upto = '+inf'
if ARGV[2] == 'expired' then
  upto = now
end
local ids = redis.call('ZRANGEBYSCORE', K.leases, '-inf', upto, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
for i = 1, #ids, 2 do
  local f = read(JOB .. ids[i], 'kind', 'attempt', 'gen')
  f = f or {}
  for _, v in ipairs({ids[i], tonumber(ids[i + 1]), f[1] or '', tonumber(f[2]) or 0, tonumber(f[3]) or 0}) do
    table.insert(out, v)
  end
end
return out
