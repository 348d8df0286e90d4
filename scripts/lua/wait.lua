-- wait: register a caller of Broker.Wait, unless the job has finished.
-- finish() in lib.lua pushes one token per registered caller into the list
-- "finished:<id>", where the callers block (BLPOP).
-- Guard: none; read-only but for the waiter count.
-- ARGV[2] id  [3] how long the registration lasts, in ms (the caller renews it)
-- Reply: {'final', state}, {'wait'}, or {'missing'}
local id = ARGV[2]
local f, bad = read(JOB .. id, 'state')
if bad then
  return redis.error_reply('job ' .. id .. ': ' .. bad)
end
if not f then
  return {'missing'}
end
if f[1] == 'done' or f[1] == 'dead' or f[1] == 'cancelled' then
  return {'final', f[1]}
end
local waiting = string.sub(JOB, 1, -5) .. 'waiting:' .. id
redis.call('INCR', waiting)
redis.call('PEXPIRE', waiting, ARGV[3])
redis.call('HSET', JOB .. id, 'waited', '1') -- finish() looks for waiters only then
return {'wait'}
