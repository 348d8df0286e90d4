-- overview: a queue at a glance, on Redis's clock. Read-only.
-- Reply: {now, scheduled, pending, running, done, dead, cancelled,
--         run_at of the job at the head of the ready index (0 when none),
--         jobs done in the current minute and in the one before, as the
--         stats hash counts them (count_settled; '' where none counted:
--         retention trims the done index, never these), 1 when paused else 0,
--         blocked, scheduled jobs due now, finished jobs whose dependents
--         are still to be settled, pending jobs a claim could take now
--         (none while paused; no more than the limits let start),
--         max_running, rate and period_ms (0 where unset), the starts the
--         rate counts now (within the last period_ms, as take.lua counts
--         them), and, when they use up the rate, ms until enough of them
--         leave the window for a job to start again (else 0): the oldest,
--         or more when the rate was lowered under what already started}
-- Bounded: the starts are counted and one is read by its rank, never
-- listed.
local now = now_ms()
-- The job at the head: of an earlier version's index or ready_hi, else
-- the first live one among the last entries of ready0, else of ready_lo.
-- Of tombs+1 entries at least one is live when ready0 holds any live
-- one, so up to lib.lua's TOMB_SKIP tombstones (a page of the oldest
-- pending jobs deleted or cancelled) are looked past: bounded, one HMGET
-- each, and only while there are tombstones.
local first = redis.call('ZRANGE', LEGACY_READY, 0, 0)[1] or redis.call('ZRANGE', K.ready_hi, 0, 0)[1]
if not first then
  local tail = redis.call('LRANGE', K.ready0, -(math.min(setting('tombs'), TOMB_SKIP) + 1), -1)
  for i = #tail, 1, -1 do
    local f = redis.call('HMGET', JOB .. tail[i], F.state, F.priority, F.group)
    if ready_live(f[1], f[2], f[3], tail[i]) then
      first = tail[i]
      break
    end
  end
end
first = first or redis.call('ZRANGE', K.ready_lo, 0, 0)[1]
local head = 0
if first then
  head = tonumber(redis.call('HGET', JOB .. first, F.run_at)) or 0
end
-- A stats key that is not a hash (a hand edit) reads as no counts here;
-- Throughput reports it.
local m = math.floor(now / 60000)
local counted = redis.pcall('HMGET', K.stats, int(m) .. ':d', int(m - 1) .. ':d')
if counted.err then
  counted = {}
end
local pending = ready_count()
local claimable = pending
if redis.call('EXISTS', K.paused) == 1 then
  claimable = 0
end
local max_running, rate, period = setting('max_running'), setting('rate'), setting('period_ms')
if max_running then
  claimable = math.min(claimable, math.max(0, max_running - redis.call('ZCARD', K.leases)))
end
local started, next_start = 0, 0
if rate and period then
  started = redis.call('ZCOUNT', K.starts, '(' .. int(now - period), '+inf')
  claimable = math.min(claimable, math.max(0, rate - started))
  if started >= rate then
    -- Below the window sit the starts a claim has not dropped yet; past
    -- them, the one whose end of window lets the count under the rate.
    local rank = redis.call('ZCOUNT', K.starts, '-inf', int(now - period)) + started - rate
    local at = redis.call('ZRANGE', K.starts, rank, rank, 'WITHSCORES')
    if at[2] then
      next_start = math.max(1, tonumber(at[2]) + period - now)
    end
  end
end
return {now,
  redis.call('ZCARD', K.scheduled), pending, redis.call('ZCARD', K.leases),
  redis.call('ZCARD', K.done), redis.call('ZCARD', K.dead), redis.call('ZCARD', K.cancelled),
  head, counted[1] or '', counted[2] or '',
  redis.call('EXISTS', K.paused), redis.call('ZCARD', K.blocked),
  redis.call('ZCOUNT', K.scheduled, '-inf', now), redis.call('LLEN', K.cascade), claimable,
  max_running or 0, rate or 0, period or 0, started, math.floor(next_start)}
