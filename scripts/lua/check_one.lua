-- check_one: one job that Check's scan suspected, read again at one instant
-- (broker.Check): the scan reads the indexes and the job hashes in separate
-- steps, so a job that moved on between them looks out of place. Read-only,
-- so a re-send is harmless. Guard: none (it changes nothing). Invariant 6:
-- this one reading is what Check judges; a job that moved legally is in the
-- index of its state here. Bounded: one TYPE, one HMGET and one ZSCORE per
-- state named; for pending, three, and for a job pending at priority 0 an
-- LPOS over at most the CHECK_SPAN newest entries of ready0: a job the
-- scan did not see there was filed after it read the list, so it is among
-- the newest (ready0 holds tombstones and older entries of ids filed
-- again, which Check does not count as listed).
-- ARGV[2] id  [3...] states (broker.States), whose indexes to look in
-- Reply: {type of the job key ('none' when there is none, 'hash' for a job),
--         state, lease_until ('' where missing or not a hash),
--         then the job's score in each named state's index, in ARGV's order,
--         '' where it is not listed; for pending, its score, 'list' when
--         in ready0, '?' when not among the CHECK_SPAN newest entries of a
--         longer ready0}
local CHECK_SPAN = 100000
local id = ARGV[2]
local key = JOB .. id
local t = redis.call('TYPE', key).ok
local out = {t, '', ''}
local priority, group
if t == 'hash' then
  local f = redis.call('HMGET', key, F.state, F.lease_until, F.priority, F.group)
  out[2], out[3], priority, group = f[1] or '', f[2] or '', f[3], f[4]
end
for i = 3, #ARGV do
  local index = INDEX[ARGV[i]]
  if not index then
    return redis.error_reply('check_one: ' .. ARGV[i] .. ' is not a state')
  end
  if ARGV[i] == 'pending' then
    local at = redis.call('ZSCORE', K.ready_hi, id) or redis.call('ZSCORE', K.ready_lo, id)
      or redis.call('ZSCORE', LEGACY_READY, id) or group and redis.call('ZSCORE', derived('gready', group), id)
    if not at and ready_live(out[2], priority) then
      if redis.call('LPOS', K.ready0, id, 'MAXLEN', CHECK_SPAN) then
        at = 'list'
      elseif redis.call('LLEN', K.ready0) > CHECK_SPAN then
        at = '?'
      end
    end
    table.insert(out, at or '')
  else
    table.insert(out, redis.call('ZSCORE', index, id) or '')
  end
end
return out
