-- wait: tell a caller of Broker.Wait whether the job has finished, and
-- register it for a wake-up when it has not. finish() in lib.lua leaves one
-- wake-up in the list "finished:<id>", where callers block (BLPOP); a
-- caller it woke passes it on to the next here, so one settlement wakes any
-- number of callers with O(1) work each (invariant 8). A wake-up left over
-- from an earlier finish (the job was retried since) only makes a caller
-- look again: the state read here decides.
-- A finished job is answered whole, read in this call, so retention cannot
-- delete it between the look and the read. A job that was waited on when it
-- finished and was trimmed since is read from its final record (trim.lua
-- keeps it there for lib.lua's WAIT_KEEP_MS). The first caller of a job
-- gives it a 'wait_tag', a number from the queue's generation counter that
-- no other job under the id gets (invariant 10); each caller names the job
-- it registered on by it, so neither a new job enqueued under the id after
-- the trim, nor that job's own final record, is taken for it.
-- Guard: none; it writes only the 'waited' flag, the tag and the passed-on
-- wake-up. A re-sent call finds the tag its lost reply carried.
-- ARGV[2] id  [3] '1' when the caller was woken by a wake-up, else '0'
--     [4] the wait_tag of the job the caller waits for, '' on its first call
-- Reply: {STATUS ok, field, value, ...} (the finished job's hash),
--     {waiting, wait_tag}, {missing}, or {corrupt, why}
local id, woken, mine = ARGV[2], ARGV[3], ARGV[4]
local key = JOB .. id
local f, bad = read(key, F.state, F.wait_tag)
if bad then
  return {STATUS.corrupt, bad}
end
if f and mine ~= '' and f[2] ~= mine then
  f = nil -- trimmed since, and its id taken by a new job
end
if not f then
  -- The caller's job among the id's final records; a first look takes
  -- the newest, the highest tag. At most WAIT_KEEP_RECORDS reads.
  local newest = -1
  for n = 1, WAIT_KEEP_RECORDS do
    local k = final_key(n, id)
    local r = redis.pcall('HMGET', k, F.state, F.wait_tag)
    if not r.err and FINAL[r[1] or ''] then
      if mine ~= '' and r[2] == mine then
        key, f = k, r
        break
      elseif mine == '' and (tonumber(r[2]) or 0) > newest then
        key, f, newest = k, r, tonumber(r[2]) or 0
      end
    end
  end
  if not f then
    return {STATUS.missing}
  end
end
if FINAL[f[1]] then
  if woken == '1' then
    wake_waiters(id, f[1])
  end
  local reply = redis.call('HGETALL', key)
  table.insert(reply, 1, STATUS.ok)
  return reply
end
local tag = f[2]
if not tag then
  tag = int(redis.call('INCR', K.gen))
  redis.call('HSET', key, F.wait_tag, tag)
end
redis.call('HSET', key, F.waited, '1') -- finish() leaves a wake-up only then
return {STATUS.waiting, tag}
