-- expired: list leases past their expiry that no reaper has taken yet (what
-- an operator checks after a deploy). Read-only; it runs as a script only to
-- read the clock of the server that holds the queue.
-- ARGV[2] limit
-- Reply: {now, (id, lease_until, kind, attempt, gen) * ...}
local now = now_ms()
local out = {now}
local ids = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #ids, 2 do
  local f = read(JOB .. ids[i], 'kind', 'attempt', 'gen')
  f = f or {}
  for _, v in ipairs({ids[i], tonumber(ids[i + 1]), f[1] or '', tonumber(f[2]) or 0, tonumber(f[3]) or 0}) do
    table.insert(out, v)
  end
end
return out
