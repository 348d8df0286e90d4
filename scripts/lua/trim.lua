-- trim: retention. Deletes finished jobs (done, cancelled, dead) older than
-- their state's maximum age, or beyond its maximum count (oldest first),
-- at most limit jobs per call: the reaper's bounded upkeep.
-- Guard: a job is deleted only if its hash is in the state of the index it
-- is listed in; another entry is only dropped from the index (invariant 6).
-- ARGV[2] limit, then (max_age_ms, max_count) for done, cancelled and dead;
--     0 means no limit of that kind
-- A job that finished within lib.lua's RESEND_HORIZON_MS is never deleted,
-- whatever the ages and counts: a re-send of the request that finished it
-- (or stored it) may still come, and must find it (invariant 9). A count
-- is so exceeded by at most the jobs finished in the last horizon, and a
-- call that finds only such jobs left deletes nothing and answers 0 more.
-- A job that Broker.Wait callers were waiting for when it finished is not
-- lost to them: until its 'wait_until' (lib.lua's WAIT_KEEP_MS after it
-- finished) its hash is renamed to a final record of its id, which expires
-- then and which only wait.lua reads. Each job under the id gets its own
-- (a free one, else the one that expires first), so a later job's trim
-- leaves an earlier one's record to its callers. Bounded: one such key per
-- waited-on job trimmed in the last WAIT_KEEP_MS, at most lib.lua's
-- WAIT_KEEP_RECORDS per id. A job nobody waited for costs nothing more.
-- It also moves the throughput window (lib.lua's stats_advance) to now, so
-- an idle queue's counters leave within ThroughputKept.
-- Reply: {the number of jobs deleted, 1 when the limit ran out (more may be
--         left to trim) else 0}
local budget = tonumber(ARGV[2])
local now = now_ms()
local deleted = 0
local function drop(index, state, ids)
  for _, id in ipairs(ids) do
    local key = JOB .. id
    local f = read(key, F.state, F.wait_until)
    if f and f[1] == state then
      local wait_until = tonumber(f[2])
      if wait_until and wait_until > now then
        -- A free record, else the oldest: the lowest wait_tag (wait.lua),
        -- which is also the one that expires first. A key that is no
        -- record (a hand edit) goes before any.
        local final, oldest
        for n = 1, WAIT_KEEP_RECORDS do
          local k = final_key(n, id)
          local r = redis.pcall('HMGET', k, F.state, F.wait_tag)
          if not r.err and not r[1] then
            final = k
            break
          end
          local tag = not r.err and tonumber(r[2]) or -1
          if not oldest or tag < oldest then
            final, oldest = k, tag
          end
        end
        redis.call('RENAME', key, final)
        redis.call('PEXPIREAT', final, int(wait_until))
      else
        redis.call('DEL', key)
      end
      deleted = deleted + 1
    end
    budget = budget - 1
  end
  if #ids > 0 then
    redis.call('ZREM', index, unpack(ids)) -- one call for the batch
  end
end
local young = '(' .. int(now - RESEND_HORIZON_MS) -- finished before this only
for i, state in ipairs({'done', 'cancelled', 'dead'}) do
  local index = INDEX[state]
  local max_age, max_count = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  if budget > 0 and max_age > 0 then
    local before = '(' .. int(now - math.max(max_age, RESEND_HORIZON_MS))
    drop(index, state, redis.call('ZRANGEBYSCORE', index, '-inf', before, 'LIMIT', 0, budget))
  end
  if budget > 0 and max_count > 0 then
    local excess = redis.call('ZCARD', index) - max_count
    if excess > 0 then
      drop(index, state, redis.call('ZRANGEBYSCORE', index, '-inf', young, 'LIMIT', 0, math.min(excess, budget)))
    end
  end
end
stats_advance(math.floor(now / 60000), true)
return {deleted, budget > 0 and 0 or 1}
