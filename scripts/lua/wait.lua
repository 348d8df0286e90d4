-- wait: tell a caller of Broker.Wait whether the job has finished, and
-- register it for a wake-up when it has not. finish() in lib.lua leaves one
-- wake-up in the list "finished:<id>", where callers block (BLPOP); a
-- caller it woke passes it on to the next here, so one settlement wakes any
-- number of callers with O(1) work each (invariant 8). A wake-up left over
-- from an earlier finish (the job was retried since) only makes a caller
-- look again: the state read here decides.
-- Guard: none; it writes only the 'waited' flag and the passed-on wake-up.
-- ARGV[2] id  [3] '1' when the caller was woken by a wake-up, else '0'
-- Reply: {'final', state}, {'wait'}, or {'missing'}
local id = ARGV[2]
local key = JOB .. id
local f, bad = read(key, 'state')
if bad then
  return redis.error_reply('job ' .. id .. ': ' .. bad)
end
if not f then
  return {'missing'}
end
if FINAL[f[1]] then
  if ARGV[3] == '1' then
    wake_waiters(id, f[1])
  end
  return {'final', f[1]}
end
redis.call('HSET', key, 'waited', '1') -- finish() leaves a wake-up only then
return {'wait'}
