-- retry: an operator sends dead or cancelled jobs back to run again, with a
-- fresh attempt budget. last_error is kept as a record.
-- Guard: the job is dead or cancelled; any other state is left alone. gen is
-- bumped (invariant 3) and the job moves to ready (invariant 6).
-- ARGV[2..] ids
-- Reply: per id, its state before the call, or 'missing'
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = JOB .. id
  local f, bad = read(key, 'state', 'priority')
  if bad then
    table.insert(out, 'corrupt: ' .. bad)
  elseif not f then
    table.insert(out, 'missing')
  else
    if f[1] == 'dead' or f[1] == 'cancelled' then
      redis.call('ZREM', INDEX[f[1]], id)
      redis.call('HINCRBY', key, 'gen', 1)
      redis.call('HSET', key, 'attempt', 0, 'token', '')
      redis.call('HDEL', key, 'finished_at', 'cancel', 'lease_until')
      to_ready(id, key, f[2])
    end
    table.insert(out, f[1])
  end
end
return out
