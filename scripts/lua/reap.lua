-- reap: recover a bounded batch of expired leases (orphaned jobs), and take
-- a bounded step of the dependents cascade: the reaper's upkeep.
-- Guard: lease_until <= now, read from the leases index and re-checked in the
-- job hash (a renew may have moved it). Each reaped job gets a new gen and
-- loses its token, so its old owner is fenced off (invariants 2 and 3); it
-- becomes pending again, dead when its attempts are spent (the crash charged
-- one), or cancelled when its cancel was requested (invariant 5). A charged
-- attempt goes into the job's error history and counts as a failed attempt
-- in the minute's throughput (one HINCRBY for the batch).
-- ARGV[2] limit (of reaped jobs, and of cascade steps beyond the inline
-- budget every finishing script settles: a small limit never leaves a
-- reaped job's dependents behind)
-- Reply: {now, 1 when the limit ran out (more expired leases may be left)
--         else 0, nreaped, (id, new state, new gen) * nreaped, 1 when cascade
--         work is left else 0, (id, problem) * ...}
local LEASE_EXPIRED = 'lease expired without renewal (worker lost)'
local limit = tonumber(ARGV[2])
local now = now_ms()
local out = {now, 0, 0}
local problems = {}
local reaped, charged = 0, 0
-- Jobs left in an earlier version's ready index: the claims move them.
if not setting('legacy') and redis.call('EXISTS', LEGACY_READY) == 1 then
  set_setting('legacy', 1)
end
local ids = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  local key = JOB .. id
  local f = read(key, F.state, F.lease_until, F.attempt, F.max_attempts, F.cancel, F.priority, F.gen, F.group)
  if not f or f[1] ~= 'running' then
    redis.call('ZREM', K.leases, id) -- not a lease (its hash is not running): never counted
    misfiled(id, key, 'leases', problems, now)
  elseif is_int(f[2]) and tonumber(f[2]) > now then
    -- Renewed in the hash but not in the index: repair the index, keep the lease.
    redis.call('ZADD', K.leases, f[2], id)
  else
    local spent = (tonumber(f[3]) or 0) >= (tonumber(f[4]) or 0)
    lease_end(id, f[8], f[5] ~= '1' and not spent)
    local gen = next_gen(f[7])
    redis.call('HSET', key, F.gen, int(gen), F.token, '', F.settled, '')
    local state
    if f[5] == '1' then
      state = 'cancelled'
      finish(id, key, state, now)
    elseif spent then
      state = 'dead'
      redis.call('HSET', key, F.last_error,
        'lease expired without renewal (worker lost) on attempt ' .. tostring(f[3]) .. ' of ' .. tostring(f[4]))
      finish(id, key, state, now)
    else
      state = 'pending'
      requeue(id, key, f[6], false, f[8], now)
    end
    if state ~= 'cancelled' then
      charged = charged + 1
      record_error(key, f[3], now, LEASE_EXPIRED)
    end
    event('reaped', id, gen, state)
    reaped = reaped + 1
    table.insert(out, id)
    table.insert(out, state)
    table.insert(out, gen)
  end
end
if #ids >= limit then
  out[2] = 1
end
out[3] = reaped
count_settled('f', charged, now)
local left = cascade_step(math.max(limit, CASCADE_INLINE), now)
if left then
  wake()
end
table.insert(out, left and 1 or 0)
for _, v in ipairs(problems) do
  table.insert(out, v)
end
return out
