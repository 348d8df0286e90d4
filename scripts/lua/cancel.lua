-- cancel: stop a job. A scheduled, pending or blocked job is cancelled at
-- once; a running job gets a cancel flag that its worker sees at the next
-- renew (the lease stays valid so the worker can stop and settle); a
-- finished job is left as it is. Dependents of a cancelled job are settled
-- by the cascade, in bounded steps (invariant 8).
-- Guard: none (an operator or enqueuer call). Serves invariant 6: a cancelled
-- job moves from its index to the cancelled index. A re-send answers the
-- state the job is in, which is what the first call answered unless the
-- job moved on in between.
-- ARGV[2] id
-- Reply: {STATUS ok, the job's state after the call ('cancelled', or
-- 'running' with the flag set, or the final state it already had)},
-- {STATUS missing}, or {STATUS corrupt, why}.
local id = ARGV[2]
local key = JOB .. id
local f, none = read_job(key, F.state, F.priority, F.group)
if none then
  return none
end
local state, group = f[1], f[3] or ''
if state == 'pending' or state == 'scheduled' or state == 'blocked' then
  local now = now_ms()
  if state == 'pending' and not (group ~= '' and group_pulled(id, group)) then
    ready_remove(id, f[2]) -- in ready0, a tombstone the claim skips
  elseif state ~= 'pending' then
    redis.call('ZREM', INDEX[state], id)
  end
  if group ~= '' then
    group_unhold(id, group) -- an ordered group held for it goes on
  end
  finish(id, key, 'cancelled', now)
  settle_cascade(now)
  return {STATUS.ok, 'cancelled'}
end
if state == 'running' then
  redis.call('HSET', key, F.cancel, '1')
  event('cancel_requested', id, redis.call('HGET', key, F.gen))
end
return {STATUS.ok, state}
