-- enqueue: create a job, pending now or scheduled for later, and leave a
-- wake-up token for a blocked worker.
-- Guard: the id is unused. An existing hash, whatever its state, is left
-- untouched, so enqueue with a caller-chosen id is idempotent.
-- Serves invariant 6: the new job is filed in the index of its state.
-- A unique key, when given, admits one job at a time: while the key holds
-- the id of a job that still exists (for ttl_ms, or until that job is done,
-- dead or cancelled when ttl_ms is 0), another enqueue answers that job.
-- ARGV[2] id  [3] kind  [4] payload  [5] max_attempts  [6] priority
--     [7] delay_ms (>= 0) or -1  [8] run_at_ms (absolute) or -1
--     [9] unique key ('' for none; in the queue's hash tag)  [10] ttl_ms
--     [11] 'cancel' or 'run': a dependent's fate when a dependency ends dead
--     or cancelled  [12..] ids of the jobs (of this queue) it depends on
-- A job whose dependencies are not all done is blocked until they are.
-- Reply: {'ok', state}, {'exists', state of the existing job},
--        {'unique', id of the job holding the unique key, its state}, or
--        {'no_parent', id of a dependency that does not exist}
local id, kind, payload = ARGV[2], ARGV[3], ARGV[4]
local key = JOB .. id

local t = redis.call('TYPE', key).ok
if t ~= 'none' then
  local state = '?'
  if t == 'hash' then
    state = redis.call('HGET', key, 'state') or '?'
  end
  return {'exists', state}
end

-- Dependencies first: a missing one refuses the enqueue before any write.
local policy = ARGV[11]
local open, failed = {}, nil
for i = 12, #ARGV do
  local f = read(JOB .. ARGV[i], 'state')
  if not f then
    return {'no_parent', ARGV[i]}
  end
  if f[1] == 'dead' or f[1] == 'cancelled' then
    if policy ~= 'run' then
      failed = failed or (ARGV[i] .. ' ended ' .. f[1])
    end
  elseif f[1] ~= 'done' then
    table.insert(open, ARGV[i])
  end
end

local unique, unique_ttl = ARGV[9], tonumber(ARGV[10])
if unique ~= '' then
  local holder = redis.call('GET', unique)
  if holder then
    local f = read(JOB .. holder, 'state')
    if f and not (unique_ttl == 0 and (f[1] == 'done' or f[1] == 'dead' or f[1] == 'cancelled')) then
      return {'unique', holder, f[1]}
    end
  end
  if unique_ttl > 0 then
    redis.call('SET', unique, id, 'PX', unique_ttl)
  else
    redis.call('SET', unique, id)
    redis.call('HSET', key, 'unique_until_done', unique)
  end
end

local now = now_ms()
local run_at = now
if tonumber(ARGV[8]) >= 0 then
  run_at = tonumber(ARGV[8])
elseif tonumber(ARGV[7]) > 0 then
  run_at = now + tonumber(ARGV[7])
end

redis.call('HSET', key,
  'kind', kind, 'payload', payload, 'attempt', 0, 'max_attempts', ARGV[5],
  'gen', 0, 'token', '', 'priority', ARGV[6],
  'created_at', now, 'run_at', int(run_at))

if failed then
  redis.call('HSET', key, 'last_error', 'dependency ' .. failed)
  finish(id, key, 'cancelled', now)
  return {'ok', 'cancelled'}
end
if #open > 0 then
  local base = string.sub(JOB, 1, -5)
  for _, parent in ipairs(open) do
    redis.call('SADD', base .. 'children:' .. parent, id)
    redis.call('HSET', JOB .. parent, 'has_children', '1') -- finish() looks for dependents only then
  end
  redis.call('HSET', key, 'state', 'blocked', 'blocked_on', #open, 'on_parent_failure', policy)
  redis.call('ZADD', K.blocked, now, id)
  event('enqueued', id, 0, 'blocked')
  return {'ok', 'blocked'}
end
if run_at > now then
  redis.call('HSET', key, 'state', 'scheduled')
  redis.call('ZADD', K.scheduled, int(run_at), id)
  wake() -- a blocked worker learns when this job falls due
  event('enqueued', id, 0, 'scheduled')
  return {'ok', 'scheduled'}
end
to_ready(id, key, ARGV[6])
event('enqueued', id, 0, 'pending')
return {'ok', 'pending'}
