-- release: the owner gives its lease back (graceful shutdown). The job is
-- pending again at once and the attempt is not charged.
-- Guard: state=running ∧ gen ∧ token (invariant 2). gen is bumped so the
-- released claim is dead from here on (invariant 3). A job whose cancel was
-- requested becomes cancelled instead.
-- ARGV[2] id  [3] gen  [4] token
-- Reply: 'pending', 'cancelled' or 'stale'
local id = ARGV[2]
local key = JOB .. id
local f = read(key, 'state', 'gen', 'token', 'cancel', 'priority')
if not holds(f, ARGV[3], ARGV[4]) then
  event('stale_rejected', id, ARGV[3], 'release')
  return 'stale'
end
redis.call('ZREM', K.leases, id)
redis.call('HINCRBY', key, 'gen', 1)
if f[4] == '1' then
  finish(id, key, 'cancelled', now_ms())
  return 'cancelled'
end
redis.call('HINCRBY', key, 'attempt', -1)
redis.call('HSET', key, 'token', '')
redis.call('HDEL', key, 'lease_until')
to_ready(id, key, f[5])
event('released', id, ARGV[3])
return 'pending'
