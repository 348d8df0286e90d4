-- wait: tell a caller of Broker.Wait whether the job has finished, and
-- register it for a wake-up when it has not. finish() in lib.lua leaves one
-- wake-up in the list "finished:<id>", where callers block (BLPOP); a
-- caller it woke passes it on to the next here, so one settlement wakes any
-- number of callers with O(1) work each (invariant 8). A wake-up left over
-- from an earlier finish (the job was retried since) only makes a caller
-- look again: the state read here decides.
-- A finished job is answered whole, read in this call, so retention cannot
-- delete it between the look and the read. A job that was waited on when it
-- finished and was trimmed since is read from final:<id> (trim.lua keeps it
-- there for lib.lua's WAIT_KEEP_MS). A caller names the job it registered
-- on by its created_at, so a new job enqueued under the same id after the
-- trim is not taken for it.
-- Guard: none; it writes only the 'waited' flag and the passed-on wake-up.
-- ARGV[2] id  [3] '1' when the caller was woken by a wake-up, else '0'
--     [4] the created_at of the job the caller waits for, '' on its first call
-- Reply: {STATUS ok, field, value, ...} (the finished job's hash),
--     {waiting, created_at}, {missing}, or {corrupt, why}
local id, woken, mine = ARGV[2], ARGV[3], ARGV[4]
local key = JOB .. id
local f, bad = read(key, 'state', 'created_at')
if bad then
  return {STATUS.corrupt, bad}
end
if f and mine ~= '' and f[2] ~= mine then
  f = nil -- trimmed since, and its id taken by a new job
end
if not f then
  key = derived('final', id)
  local k = redis.pcall('HMGET', key, 'state', 'created_at')
  if k.err or not FINAL[k[1] or ''] or (mine ~= '' and k[2] ~= mine) then
    return {STATUS.missing}
  end
  f = k
end
if FINAL[f[1]] then
  if woken == '1' then
    wake_waiters(id, f[1])
  end
  local reply = redis.call('HGETALL', key)
  table.insert(reply, 1, STATUS.ok)
  return reply
end
redis.call('HSET', key, 'waited', '1') -- finish() leaves a wake-up only then
return {STATUS.waiting, f[2] or ''}
