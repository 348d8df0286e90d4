-- limits: change the limits of a queue that the caller names and keep the
-- others, in one step (Broker.ChangeLimits): a limit another operator
-- changes at the same moment is kept unless this call names it too. A
-- rate and its period are kept as a pair: a new period keeps the rate it
-- finds, a new rate the period it finds. Checked before anything is
-- written: a refused change changes nothing. One hash read and written:
-- bounded (invariant 8). It sets values, so a re-send sets the same ones
-- and answers the same limits (invariant 9).
-- ARGV[2] max running  [3] rate  [4] period in ms: each '' to keep it;
--         a max running or rate of 0 removes that limit
-- Reply: {'ok', max_running, rate, period_ms}, the limits now; or
--        {'no_rate'} (a period given, and no rate given or kept) or
--        {'no_period'} (a rate given, and no period given or kept).
local function num(v) return tonumber(v) or 0 end
local cur = redis.call('HMGET', K.limits, 'max_running', 'rate', 'period_ms')
local max, rate, per = num(cur[1]), num(cur[2]), num(cur[3])
local max_given, rate_given, per_given = ARGV[2] ~= '', ARGV[3] ~= '', ARGV[4] ~= ''
if max_given then max = num(ARGV[2]) end
if rate_given then rate = num(ARGV[3]) end
if per_given then per = num(ARGV[4]) end
if rate_given or per_given then
  if rate == 0 and not rate_given then
    return {'no_rate'}
  elseif rate == 0 then
    per = 0
  elseif per == 0 then
    return {'no_period'}
  end
end
if max_given and max > 0 then
  redis.call('HSET', K.limits, 'max_running', max)
elseif max_given then
  redis.call('HDEL', K.limits, 'max_running')
end
if (rate_given or per_given) and rate > 0 then
  redis.call('HSET', K.limits, 'rate', rate, 'period_ms', per)
elseif rate_given or per_given then
  redis.call('HDEL', K.limits, 'rate', 'period_ms')
end
redis.call('RPUSH', K.wake, '1') -- pools blocked by the old limits look again
redis.call('LTRIM', K.wake, 0, 0)
return {'ok', max, rate, per}
