-- claim: take up to n ready jobs of the queue (take.lua says how).
-- ARGV[2] lease_ms  [3] n  [4] promote_limit  [5] token base, unique per
--     request  [6] cascade budget
-- Reply: take's.
return take(nil, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]))
