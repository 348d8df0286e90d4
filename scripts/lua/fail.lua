-- fail: the handler failed (or asked to run later).
-- Guard: state=running ∧ gen ∧ token (invariant 2).
-- Modes: 'retry' schedules the job at now+backoff, or makes it dead when its
-- attempts are spent; 'dead' makes it dead now (a permanent error); 'snooze'
-- reschedules it at now+backoff without charging the attempt. A job whose
-- cancel was requested becomes cancelled whatever the mode.
-- ARGV[2] id  [3] gen  [4] token  [5] mode  [6] error  [7] backoff_ms
-- Reply: the job's new state ('scheduled', 'pending', 'dead', 'cancelled')
--        or 'stale'
local id, mode, backoff = ARGV[2], ARGV[5], tonumber(ARGV[7])
local key = JOB .. id
local f = read(key, 'state', 'gen', 'token', 'cancel', 'attempt', 'max_attempts', 'priority')
if not holds(f, ARGV[3], ARGV[4]) then
  event('stale_rejected', id, ARGV[3], mode)
  return 'stale'
end
local now = now_ms()
redis.call('ZREM', K.leases, id)
if mode ~= 'snooze' then
  redis.call('HSET', key, 'last_error', ARGV[6])
end
if f[4] == '1' then
  finish(id, key, 'cancelled', now)
  return 'cancelled'
end
if mode == 'dead' or (mode == 'retry' and (tonumber(f[5]) or 0) >= (tonumber(f[6]) or 0)) then
  finish(id, key, 'dead', now)
  return 'dead'
end
if mode == 'snooze' then
  redis.call('HINCRBY', key, 'attempt', -1)
end
redis.call('HSET', key, 'token', '', 'run_at', int(now + backoff))
redis.call('HDEL', key, 'lease_until')
event(mode == 'snooze' and 'snoozed' or 'retried', id, ARGV[3], ARGV[6])
if backoff <= 0 then
  to_ready(id, key, f[7])
  return 'pending'
end
redis.call('HSET', key, 'state', 'scheduled')
redis.call('ZADD', K.scheduled, int(now + backoff), id)
wake() -- a blocked worker learns when the retry falls due
return 'scheduled'
