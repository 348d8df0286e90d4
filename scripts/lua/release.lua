-- release: the owner gives its lease back (graceful shutdown). The job is
-- pending again at once and the attempt is not charged.
-- Guard: state=running ∧ gen ∧ token (invariant 2). The job gets a new gen
-- so the released claim is dead from here on (invariant 3). A job whose
-- cancel was requested becomes cancelled instead. A re-send whose first
-- reply was lost answers what the first call did (invariant 9).
-- ARGV[2] id  [3] gen  [4] token
-- Reply: {STATUS ok, 'pending' or 'cancelled'} or {STATUS stale, ''}
local id = ARGV[2]
local key = JOB .. id
local f = read(key, F.state, F.gen, F.token, F.settled, F.cancel, F.priority, F.group)
if not holds(f, ARGV[3], ARGV[4]) then
  local again = resettled(key, f, ARGV[4], 'release')
  if again then
    return {STATUS.ok, again}
  end
  event('stale_rejected', id, ARGV[3], 'release')
  return {STATUS.stale, ''}
end
lease_end(id, f[7], f[5] ~= '1')
redis.call('HSET', key, F.gen, int(next_gen(f[2])))
if f[5] == '1' then
  local now = now_ms()
  settled(key, 'release', 'cancelled')
  finish(id, key, 'cancelled', now)
  settle_cascade(now)
  return {STATUS.ok, 'cancelled'}
end
settled(key, 'release', 'pending')
requeue(id, key, f[6], true, f[7])
event('released', id, ARGV[3])
return {STATUS.ok, 'pending'}
