-- delete: an operator deletes one job that no worker holds: its hash and
-- every entry that names it. A blocked, scheduled or pending job leaves its
-- index (ready0 keeps a tombstone, as cancel leaves one; a grouped job
-- leaves its group's set and g_pending), frees its unique key and the
-- ordered group that held for it, wakes its Broker.Wait callers (who then
-- find no job), and hands its dependents to the cascade as a cancel would:
-- each is cancelled ("dependency X was deleted") unless it runs anyway, so
-- none waits for ever (invariant 8: one cascade entry here, settled in
-- bounded steps). A finished job leaves its state's index; it owes nothing
-- more, since finish() paid its debts when it ended.
-- Guard: the job is not running (a running job is stopped by cancel: its
-- worker holds a valid claim, invariant 1), and, when the caller passes
-- the state it saw (the dashboard does), the job is still in that state:
-- a job that moved on meanwhile is refused, unchanged. Invariant 6: the
-- hash and its index entry go together. Invariant 10: the queue's
-- generation counter is not touched, so a job enqueued again under the id
-- gets a greater generation at its first claim.
-- A re-send (invariant 9) finds the record this call leaves under
-- derived('deleted', nonce) for RESEND_HORIZON_MS, the state the job was
-- in, and answers what the first call did, without touching a job
-- enqueued under the id since. The record is the request's own: another
-- Delete of a job enqueued under the id since leaves its own record and
-- never hides this one, so the re-send does not delete that job's
-- successor.
-- ARGV[2] request nonce  [3] id  [4] the state the caller saw, or '' for any
-- Reply: {STATUS ok, the state the job was in}, {STATUS wrong_state, its
-- state} (running, or not the state seen), {STATUS missing}, or
-- {STATUS corrupt, why}.
local nonce, id, seen = ARGV[2], ARGV[3], ARGV[4]
local key = JOB .. id
local record = derived('deleted', nonce)
local r = redis.pcall('GET', record)
if type(r) == 'string' and INDEX[r] then
  return {STATUS.ok, r}
end
local f, none = read_job(key, F.state, F.priority, F.group, F.unique_until_done, F.waited, F.has_children, F.gen)
if none then
  return none
end
local state, group = f[1], f[3] or ''
if state == 'running' or (seen ~= '' and state ~= seen) then
  return {STATUS.wrong_state, state}
end
if not INDEX[state] then
  return {STATUS.corrupt, 'job hash has unknown state "' .. state .. '"'}
end
local now = now_ms()
if state == 'pending' then
  if not (group ~= '' and group_pulled(id, group)) then
    ready_remove(id, f[2]) -- in ready0, a tombstone the claim skips
  end
else
  redis.call('ZREM', INDEX[state], id)
end
if not FINAL[state] then
  if group ~= '' then
    group_unhold(id, group) -- an ordered group held for it goes on
  end
  if f[4] and redis.call('GET', f[4]) == id then
    redis.call('DEL', f[4]) -- its unique key, held until it ended
  end
  if f[6] then
    detach_children(id, 'deleted')
  end
  if f[5] then
    wake_waiters(id, 'deleted')
  end
end
redis.call('DEL', key)
redis.call('SET', record, state, 'PX', RESEND_HORIZON_MS)
event('deleted', id, f[7], state)
settle_cascade(now)
return {STATUS.ok, state}
