-- enqueue: create a job, pending now or scheduled for later, and leave a
-- wake-up token for a blocked worker.
-- Guard: the id is unused. An existing hash, whatever its state, is left
-- untouched, so enqueue with a caller-chosen id is idempotent. A re-send of
-- this very request (its reply was lost) answers ok again (invariant 9):
-- the request is recognised by its nonce, or, for an id the broker
-- generated for this request, by the id itself.
-- Serves invariant 6: the new job is filed in the index of its state.
-- A unique key, when given, admits one job at a time. The holder's own
-- terms decide: a key with a TTL is held until it expires, whatever becomes
-- of its job (retention included); a key without one is held until its job
-- is done, dead or cancelled (finish() deletes it).
-- ARGV[2] id  [3] kind  [4] payload  [5] max_attempts  [6] priority
--     [7] delay_ms (>= 0) or -1  [8] run_at_ms (absolute) or -1
--     [9] unique key ('' for none; in the queue's hash tag)  [10] ttl_ms
--     [11] 'cancel' or 'run': a dependent's fate when a dependency ends dead
--     or cancelled  [12] request nonce, '' when the broker generated the id
--     [13] metadata, a JSON object of strings, or '' for none (no field)
--     [14] group, or '' for none (no field)
--     [15..] ids of the jobs (of this queue) it depends on; duplicates count once
-- A job whose dependencies are not all done is blocked until they are.
-- Reply: {STATUS ok, state}, {exists, state of the existing job},
--        {unique_held, id of the job holding the unique key, its state or ''},
--        or {no_dependency, id of a dependency that does not exist}
local id, kind, payload, nonce = ARGV[2], ARGV[3], ARGV[4], ARGV[12]
local key = JOB .. id

local t = redis.call('TYPE', key).ok
if t ~= 'none' then
  local state = '?'
  if t == 'hash' then
    local f = redis.call('HMGET', key, F.state, F.req)
    state = f[1] or '?'
    if nonce == '' or f[2] == nonce then
      return {STATUS.ok, state} -- our own job: this is a re-send
    end
  end
  return {STATUS.exists, state}
end

-- Dependencies first: a missing one refuses the enqueue before any write.
local policy = ARGV[11]
local deps = {}
for i = 15, #ARGV do
  table.insert(deps, ARGV[i])
end
local open, failed, missing = dependencies(deps, policy)
if missing then
  return {STATUS.no_dependency, missing}
end

local unique, unique_ttl = ARGV[9], tonumber(ARGV[10])
if unique ~= '' then
  local holder, hs = unique_holder(unique)
  if holder then
    return {STATUS.unique_held, holder, hs}
  end
  if unique_ttl > 0 then
    redis.call('SET', unique, id, 'PX', unique_ttl)
  else
    redis.call('SET', unique, id)
  end
end

local now = now_ms()
local run_at = now
if tonumber(ARGV[8]) >= 0 then
  run_at = tonumber(ARGV[8])
elseif tonumber(ARGV[7]) > 0 then
  run_at = now + tonumber(ARGV[7])
end

-- The job's fields in one HSET, with its state when it goes in ready or
-- scheduled here (block and finish write theirs).
local fields = {F.kind, kind, F.payload, payload, F.attempt, 0, F.max_attempts, ARGV[5],
  F.gen, 0, F.token, '', F.priority, ARGV[6],
  F.created_at, now, F.run_at, int(run_at)}
local function add(...)
  for _, v in ipairs({...}) do
    table.insert(fields, v)
  end
end
if unique ~= '' and unique_ttl <= 0 then
  add(F.unique_until_done, unique)
end
if nonce ~= '' then
  add(F.req, nonce)
end
if ARGV[13] ~= '' then
  add(F.meta, ARGV[13])
end
if ARGV[14] ~= '' then
  add(F.group, ARGV[14])
end
if #deps > 0 then
  add(F.depends_on, cjson.encode(deps), F.on_parent_failure, policy)
end
if not failed and #open == 0 then
  add(F.state, run_at > now and 'scheduled' or 'pending')
end
redis.call('HSET', key, unpack(fields))

if failed then
  -- blocked_on > 0 marks a job whose dependencies were never met: a
  -- retry waits for them again (retry.lua).
  redis.call('HSET', key, F.last_error, 'dependency ' .. failed, F.blocked_on, #open + 1)
  finish(id, key, 'cancelled', now)
  return {STATUS.ok, 'cancelled'}
end
if #open > 0 then
  block(id, key, open, now)
  event('enqueued', id, 0, 'blocked')
  return {STATUS.ok, 'blocked'}
end
if run_at > now then
  redis.call('ZADD', K.scheduled, int(run_at), id)
  sched_lower(run_at)
  wake() -- a blocked worker learns when this job falls due
  event('enqueued', id, 0, 'scheduled')
  return {STATUS.ok, 'scheduled'}
end
to_ready(id, key, ARGV[6], true, ARGV[14], now)
event('enqueued', id, 0, 'pending')
return {STATUS.ok, 'pending'}
