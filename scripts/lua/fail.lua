-- fail: the handler failed (or asked to run later).
-- Guard: state=running ∧ gen ∧ token (invariant 2).
-- Modes: 'retry' schedules the job at now+backoff, or makes it dead when its
-- attempts are spent; 'dead' makes it dead now (a permanent error); 'snooze'
-- reschedules it at now+backoff without charging the attempt; 'unhandled'
-- gives back a job whose kind the pool has no handler for: like a snooze,
-- after a wait three times as long as the job has waited so far (so the
-- time it has waited quadruples with each give-back: a backlog of them
-- reaches the longest wait in few claims), between backoff and ARGV[13]
-- ms, or dead once it has waited ARGV[14] ms (-1: never); its claim's
-- start no longer counts against the rate limit. A job whose cancel was
-- requested becomes cancelled whatever the mode.
-- A re-send whose first reply was lost answers the state that first call
-- left and writes nothing (invariant 9).
-- A failure (retry or dead, and an unhandled give-back that ends dead) is
-- kept in the job's error history and, unless it ends in a cancellation,
-- counts as a failed attempt in the minute's throughput; a snooze and an
-- unhandled give-back are neither.
-- An unhandled job's wait began at the first of an unbroken run of
-- unhandled give-backs (the claim before this one ended in one, as its
-- record in PREV_SETTLED says), kept in its field unhandled_since; any
-- other end of a claim in between starts it again: another settlement
-- (its record comes first), a reap or force release (requeue deletes the
-- field), and an operator's retry (retry.lua deletes it). Only this mode
-- writes the field.
-- It may take the caller's next jobs in the same call (take.lua), after the
-- settlement, so a pool whose handler failed runs the next job for one
-- round trip.
-- ARGV[2] id  [3] gen  [4] token  [5] mode  [6] error  [7] backoff_ms
--     [8] n to claim after (0: claim nothing)  [9] lease_ms  [10] promote_limit
--     [11] claim request id  [12] cascade budget
--     [13] unhandled: the longest wait, ms  [14] unhandled: dead after, ms
-- Reply: {STATUS ok, the job's new state ('scheduled', 'pending', 'dead',
--        'cancelled')} or {STATUS stale, ''}; take's reply follows as a
--        third, nested value when n > 0
-- unhandled_wait is how long the job of key has waited for a handler,
-- starting the wait now unless the claim before this one was given back
-- unhandled too. A Redis clock set back before the wait began counts no
-- wait (0), never a negative one, until it passes that time again.
local function unhandled_wait(key, now)
  local f = redis.call('HMGET', key, PREV_SETTLED[1], F.unhandled_since)
  local since = tonumber(f[2])
  if not since or not string.find(f[1] or '', ' unhandled scheduled$') then
    since = now
    redis.call('HSET', key, F.unhandled_since, int(now))
  end
  return math.max(0, now - since)
end

-- now is the Redis time, read once the guard has passed (take reads it
-- itself after a refused settlement).
local now
local function settle()
  local id, mode, backoff = ARGV[2], ARGV[5], tonumber(ARGV[7])
  local key = JOB .. id
  local f = read(key, F.state, F.gen, F.token, F.settled, F.cancel, F.attempt, F.max_attempts, F.priority, F.group,
    F.claimed_at)
  if not holds(f, ARGV[3], ARGV[4]) then
    local again = resettled(key, f, ARGV[4], mode)
    if again then
      return STATUS.ok, again
    end
    event('stale_rejected', id, ARGV[3], mode)
    return STATUS.stale, ''
  end
  now = now_ms()
  local group = f[9] or ''
  if mode == 'unhandled' then
    -- The claim ran nothing: its start does not count against the
    -- queue's rate limit (take.lua keeps starts by token, unique to it),
    -- nor its group's, when it was that group's last start.
    redis.call('ZREM', K.starts, ARGV[4])
    if group ~= '' and f[10] then
      local rate_key = derived('grate', group)
      if redis.call('GET', rate_key) == f[10] then
        redis.call('DEL', rate_key)
      end
    end
  end
  local state
  if f[5] == '1' then
    state = 'cancelled'
  elseif mode == 'dead' or (mode == 'retry' and (tonumber(f[6]) or 0) >= (tonumber(f[7]) or 0)) then
    state = 'dead'
  elseif mode == 'unhandled' then
    local waited, limit = unhandled_wait(key, now), tonumber(ARGV[14])
    if limit >= 0 and waited >= limit then
      state = 'dead'
    end
    backoff = math.min(math.max(3 * waited, backoff), tonumber(ARGV[13]))
  end
  lease_end(id, group, not state)
  local failed = mode == 'retry' or mode == 'dead' or (mode == 'unhandled' and state == 'dead')
  if failed then
    redis.call('HSET', key, F.last_error, ARGV[6])
    record_error(key, f[6], now, ARGV[6])
  end
  if failed and state ~= 'cancelled' then
    count_settled('f', 1, now)
  end
  if state then
    settled(key, mode, state)
    finish(id, key, state, now)
    settle_cascade(now)
    return STATUS.ok, state
  end
  if mode ~= 'retry' then
    redis.call('HINCRBY', key, F.attempt, -1)
  end
  redis.call('HSET', key, F.run_at, int(now + backoff))
  redis.call('HDEL', key, F.lease_until)
  event(({retry = 'retried', snooze = 'snoozed', unhandled = 'unhandled'})[mode], id, ARGV[3], ARGV[6])
  if backoff <= 0 then
    settled(key, mode, 'pending')
    to_ready(id, key, f[8], false, group, now)
    return STATUS.ok, 'pending'
  end
  redis.call('HSET', key, F.state, 'scheduled')
  settled(key, mode, 'scheduled')
  redis.call('ZADD', K.scheduled, int(now + backoff), id)
  sched_lower(now + backoff)
  wake() -- a blocked worker learns when the retry falls due
  return STATUS.ok, 'scheduled'
end

local status, state = settle()
local n = tonumber(ARGV[8])
if n > 0 then
  return {status, state, take(now, tonumber(ARGV[9]), n, tonumber(ARGV[10]), ARGV[11], tonumber(ARGV[12]))}
end
return {status, state}
