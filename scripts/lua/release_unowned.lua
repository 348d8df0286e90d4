-- release_unowned: an operator takes a job's lease away without holding it.
-- Guard: the job has not finished. A finished job (done, dead, cancelled)
-- is refused (wrong_state) and left exactly as it is: no claim of it can be
-- valid, and a new gen would only make its stored result look superseded.
-- Any other job gets a new gen (invariant 3), so any claim in flight,
-- including a worker's ack racing this call, is stale from now on
-- (invariant 2). A running job becomes pending again with its attempt
-- refunded (the worker did not fail; an operator intervened), or cancelled
-- when its cancel was requested. Other states are kept.
-- ARGV[2] id
-- Reply: {STATUS ok, previous state, new state, new gen},
-- {STATUS wrong_state, its state}, {STATUS missing}, or {STATUS corrupt, why}.
local id = ARGV[2]
local key = JOB .. id
local f, none = read_job(key, F.state, F.gen, F.cancel, F.priority, F.group)
if none then
  return none
end
if FINAL[f[1]] then
  return {STATUS.wrong_state, f[1]}
end
if not is_int(f[2] or 0) then
  return {STATUS.corrupt, 'corrupt job hash: field gen is "' .. f[2] .. '", not an integer'}
end
local gen = next_gen(f[2])
redis.call('HSET', key, F.gen, int(gen))
if f[1] ~= 'running' then
  return {STATUS.ok, f[1], f[1], gen}
end
lease_end(id, f[5], f[3] ~= '1')
redis.call('HSET', key, F.token, '', F.settled, '')
if f[3] == '1' then
  local now = now_ms()
  finish(id, key, 'cancelled', now)
  settle_cascade(now)
  return {STATUS.ok, 'running', 'cancelled', gen}
end
requeue(id, key, f[4], true, f[5])
event('force_released', id, gen)
return {STATUS.ok, 'running', 'pending', gen}
