-- check_groups: groups that Check's scan suspected, read again at one
-- instant (broker.Check): the scan counts running jobs per group from the
-- job hashes and reads grunning, grotation and gwait in separate
-- steps, so a group whose jobs moved on between them looks out of place.
-- Read-only, so a re-send is harmless. Guard: none (it changes nothing).
-- Invariant 11: grunning[g] (absent = 0) is the number of jobs of group g
-- whose hash says running; counted here from the leases index, where every
-- running job is (invariant 6), and from the ids Check names that the scan
-- saw running outside it. G2: a group with jobs in its gready is in
-- grotation or gwait, and the queue's groups flag is on; while it is on,
-- the queue's ungrouped pending jobs (member '') are in grotation.
-- Bounded: at most CHECK_SPAN entries of leases, one HMGET each; per group
-- named, four reads; one per id named.
-- ARGV[2] m, the number of groups  [3..2+m] the groups ('' for the
--   ungrouped jobs)  [3+m...] ids of jobs the scan saw running outside the
--   leases index
-- Reply: {'1' when leases holds more than CHECK_SPAN entries (the counts
--         are then a floor), '0' otherwise; the groups flag ('' when absent);
--         then per group, in ARGV's order: grunning's field ('' when
--         absent), the number of jobs counted running, '1' when it has pending jobs
--         (its gready exists; for '', the ungrouped ready indexes hold
--         jobs) else '0', its score in grotation, its score in gwait ('' where
--         absent)}
local CHECK_SPAN = 100000
local m = tonumber(ARGV[2])
local groups, named, count = {}, {}, {}
for i = 1, m do
  groups[i] = ARGV[2 + i]
  named[groups[i]] = true
end
-- job reads a job's state and group; a key that is not a hash reads '?'.
local function job(id)
  local f = redis.pcall('HMGET', JOB .. id, F.state, F.group)
  if f.err then
    return '?', ''
  end
  return f[1] or '', f[2] or ''
end
local function tally(id)
  local state, g = job(id)
  if state == 'running' and g ~= '' and named[g] then
    count[g] = (count[g] or 0) + 1
  end
end
local seen = {}
for _, id in ipairs(redis.call('ZRANGE', K.leases, 0, CHECK_SPAN - 1)) do
  seen[id] = true
  tally(id)
end
for i = 3 + m, #ARGV do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    tally(ARGV[i])
  end
end
local out = {redis.call('ZCARD', K.leases) > CHECK_SPAN and '1' or '0', redis.call('HGET', K.limits, 'groups') or ''}
for _, g in ipairs(groups) do
  local pending
  if g == '' then
    -- The ungrouped indexes' lengths, less ready0's tombstones (the
    -- pending count of ready_count, without the groups').
    pending = redis.call('LLEN', K.ready0) - setting('tombs') + redis.call('ZCARD', K.ready_hi)
      + redis.call('ZCARD', K.ready_lo) + redis.call('ZCARD', LEGACY_READY) > 0
  else
    pending = redis.call('EXISTS', derived('gready', g)) == 1
  end
  for _, v in ipairs({redis.call('HGET', K.grunning, g) or '', count[g] or 0, pending and '1' or '0',
      redis.call('ZSCORE', K.grotation, g) or '', redis.call('ZSCORE', K.gwait, g) or ''}) do
    table.insert(out, v)
  end
end
return out
