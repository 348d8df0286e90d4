-- renew: extend many leases of one queue in one call.
-- Guard, per lease: state=running ∧ gen ∧ token (invariant 2). Expiry does
-- not enter it: a lease past lease_until that no reaper has taken still
-- belongs to its token and renews (invariant 4).
-- Each renewal counts in the job's 'renewals' (the claim resets it): one
-- HINCRBY, measured cheaper than reading the field with the guard's and
-- writing it with lease_until. A hand-edited value that is not an integer
-- stays uncounted until the next claim, rather than abort the script after
-- the lease was extended.
-- ARGV[2] lease_ms, then (id, gen, token) for each lease.
-- Reply: {now, (status, lease_until) per lease}; status ok, stale (the
-- lease is gone; lease_until 0), or cancel: extended, but the job's
-- cancellation was requested (the lease is still extended so the handler
-- can stop and settle).
local lease_ms = tonumber(ARGV[2])
local now = now_ms()
local until_ms = now + lease_ms
local out = {now}
for i = 3, #ARGV, 3 do
  local id, gen, token = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local key = JOB .. id
  local f = read(key, F.state, F.gen, F.token, F.cancel)
  if holds(f, gen, token) then
    redis.call('HSET', key, F.lease_until, int(until_ms))
    redis.pcall('HINCRBY', key, F.renewals, 1)
    redis.call('ZADD', K.leases, int(until_ms), id)
    if f[4] == '1' then
      table.insert(out, STATUS.cancel)
    else
      table.insert(out, STATUS.ok)
    end
    table.insert(out, until_ms)
  else
    event('lease_lost', id, gen)
    table.insert(out, STATUS.stale)
    table.insert(out, 0)
  end
end
return out
