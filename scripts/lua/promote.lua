-- promote: an operator runs a scheduled job now: a delayed job, or a
-- retry waiting out its backoff. It leaves scheduled and joins the ready
-- index at the tail of its priority (or its group's set, where its group's
-- limits apply as to any pending job), with run_at = now; its attempt and
-- generation are kept. An ordered group that holds for it (a retry) comes
-- back from the timer to take it next.
-- Guard: the job is scheduled; any other state is refused, unchanged
-- (wrong_state). Invariant 6: it moves from scheduled to the ready index
-- in this one call. A re-send (invariant 9) finds the record this call
-- leaves under derived('promoted', nonce) for RESEND_HORIZON_MS and
-- answers ok again, changing nothing, whatever the job did since: claimed,
-- sent back to its backoff (even after another Promote, which leaves a
-- record of its own), or deleted and its id enqueued again as another
-- scheduled job.
-- ARGV[2] request nonce  [3] id
-- Reply: {STATUS ok, 'scheduled' (the state it was in)},
-- {STATUS wrong_state, its state}, {STATUS missing}, or {STATUS corrupt, why}.
local nonce, id = ARGV[2], ARGV[3]
local key = JOB .. id
local record = derived('promoted', nonce)
if redis.pcall('GET', record) == id then
  return {STATUS.ok, 'scheduled'}
end
local f, none = read_job(key, F.state, F.priority, F.group, F.gen)
if none then
  return none
end
if f[1] ~= 'scheduled' then
  return {STATUS.wrong_state, f[1]}
end
local now = now_ms()
local group = f[3] or ''
redis.call('ZREM', K.scheduled, id)
redis.call('HSET', key, F.run_at, int(now))
to_ready(id, key, f[2], false, group, now)
if group ~= '' and redis.call('HGET', K.ghold, group) == id then
  rotate_back({group}) -- parked until the retry was due
end
redis.call('SET', record, id, 'PX', RESEND_HORIZON_MS)
event('promoted', id, f[4])
return {STATUS.ok, 'scheduled'}
