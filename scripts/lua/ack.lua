-- ack: the handler succeeded; the job is done.
-- Guard: state=running ∧ gen ∧ token (invariant 2): a stale worker's late
-- success never overwrites the attempt that replaced it.
-- ARGV[2] id  [3] gen  [4] token  [5] result
-- Reply: 'done' or 'stale'
local id = ARGV[2]
local key = JOB .. id
if not holds(read(key, 'state', 'gen', 'token'), ARGV[3], ARGV[4]) then
  return 'stale'
end
redis.call('ZREM', K.leases, id)
redis.call('HSET', key, 'result', ARGV[5])
finish(id, key, 'done', now_ms())
return 'done'
