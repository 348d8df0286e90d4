-- overview: a queue at a glance, on Redis's clock. Read-only.
-- ARGV[2] throughput window in ms
-- Reply: {now, scheduled, pending, running, done, dead, cancelled,
--         run_at of the job at the head of ready (0 when none),
--         jobs finished done within the window, 1 when paused else 0,
--         blocked, scheduled jobs due now, finished jobs whose dependents
--         are still to be settled}
local now = now_ms()
local head = 0
local first = redis.call('ZRANGE', K.ready, 0, 0)
if first[1] then
  head = tonumber(redis.call('HGET', JOB .. first[1], 'run_at')) or 0
end
return {now,
  redis.call('ZCARD', K.scheduled), redis.call('ZCARD', K.ready), redis.call('ZCARD', K.leases),
  redis.call('ZCARD', K.done), redis.call('ZCARD', K.dead), redis.call('ZCARD', K.cancelled),
  head, redis.call('ZCOUNT', K.done, '(' .. int(now - tonumber(ARGV[2])), now),
  redis.call('EXISTS', K.paused), redis.call('ZCARD', K.blocked),
  redis.call('ZCOUNT', K.scheduled, '-inf', now), redis.call('LLEN', K.cascade)}
