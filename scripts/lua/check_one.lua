-- check_one: one job that Check's scan suspected, read again at one instant
-- (broker.Check): the scan reads the indexes and the job hashes in separate
-- steps, so a job that moved on between them looks out of place. Read-only,
-- so a re-send is harmless. Guard: none (it changes nothing). Invariant 6:
-- this one reading is what Check judges; a job that moved legally is in the
-- index of its state here. Bounded: one TYPE, one HMGET and one ZSCORE per
-- state named.
-- ARGV[2] id  [3...] states (broker.States), whose indexes to look in
-- Reply: {type of the job key ('none' when there is none, 'hash' for a job),
--         state, lease_until ('' where missing or not a hash),
--         then the job's score in each named state's index, in ARGV's order,
--         '' where it is not listed}
local id = ARGV[2]
local key = JOB .. id
local t = redis.call('TYPE', key).ok
local out = {t, '', ''}
if t == 'hash' then
  local f = redis.call('HMGET', key, 'state', 'lease_until')
  out[2], out[3] = f[1] or '', f[2] or ''
end
for i = 3, #ARGV do
  local index = INDEX[ARGV[i]]
  if not index then
    return redis.error_reply('check_one: ' .. ARGV[i] .. ' is not a state')
  end
  table.insert(out, redis.call('ZSCORE', index, id) or '')
end
return out
