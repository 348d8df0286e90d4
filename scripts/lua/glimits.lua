-- glimits: change the group limits of a queue (Inspector.ChangeGroupLimits):
-- the defaults every group takes (settings fields g_max_running, g_rate,
-- g_period_ms, g_ordered), or one group's override (its field of glimits,
-- "<max_running> <rate> <period_ms> <ordered>", each '-' for the default).
-- The limits the caller names change; the others are kept, so a limit
-- another operator changes at the same moment is kept unless this call
-- names it too. A rate and its period are a pair, as in limits.lua: a new
-- rate keeps the period in force, a new period the rate in force (for a
-- group: its override's, else the default's). Checked before anything is
-- written: a refused change changes nothing. It keeps g_overrides '1'
-- exactly while glimits has fields, and glimits at most MAX_OVERRIDES
-- fields. A named group that waits in gwait goes back to grotation, so that
-- a raised limit holds from the next claim; a spare turn costs the claim one
-- skipped step (groups design, P2). One hash field, one group: bounded
-- (invariant 8). It sets values, so a re-send sets the same ones and
-- answers the same limits (invariant 9).
-- ARGV[2] group ('' = the queue's defaults)
--     [3] max running  [4] rate  [5] period in ms  [6] ordered ('0'/'1'):
--         each '' to keep it; a max running or rate of 0 is none (for a
--         group: none even where the default has one); '-' (a group only)
--         takes the default again (for the rate, the rate and its period)
--     [7] '1': the group's override is dropped first (every limit not
--         named takes the default; nothing named removes the override)
-- Reply: {'ok', d_max, d_rate, d_period_ms, d_ordered, override, max, rate,
--        period_ms, ordered}, all strings: the defaults now ('0' = none),
--        override '1' when the group has one now, and its four tokens
--        ('-' = the default; '-' all four for the defaults or no override);
--        or
--        {'no_rate'} (a period given, and no rate given or in force),
--        {'no_period'} (a rate given, and no period given or in force),
--        {'too_fast', rate, period_ms} (starts less than 1 ms apart),
--        {'too_many', n} (a new override past MAX_OVERRIDES; n = their number).
local MAX_OVERRIDES = 100000
local group = ARGV[2]
local a_max, a_rate, a_per, a_ord = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local reset = ARGV[7] == '1'
local function n(v) return tonumber(v) or 0 end
-- A count as stored: a whole number, at least 0; anything else reads as
-- none ('0'), as the claim reads it (lib.lua's group_limits).
local function count(v)
  if type(v) == 'string' and string.match(v, '^%d+$') then return v end
  return '0'
end

local def = redis.call('HMGET', K.limits, 'g_max_running', 'g_rate', 'g_period_ms', 'g_ordered')
local d_max, d_rate, d_per = count(def[1]), count(def[2]), count(def[3])
if n(d_rate) == 0 or n(d_per) == 0 then d_rate, d_per = '0', '0' end
local d_ord = (def[4] == '1') and '1' or '0'

local max, rate, per, ord
local exists
if group == '' then
  max, rate, per, ord = d_max, d_rate, d_per, d_ord
else
  local cur = redis.call('HGET', K.glimits, group)
  exists = cur ~= false
  -- Read as the claim reads it: four tokens or no override; '-' is the
  -- default, a token that is no count is none.
  max, rate, per, ord = '-', '-', '-', '-'
  local m, r, p, o = string.match(cur or '', '^(%S+) (%S+) (%S+) (%S+)$')
  if m and not reset then
    if m ~= '-' then max = count(m) end
    if r ~= '-' then
      rate, per = count(r), count(p)
      if n(rate) == 0 or n(per) == 0 then rate, per = '0', '0' end
    end
    if o ~= '-' then ord = (o == '1') and '1' or '0' end
  end
end

if a_max ~= '' then max = a_max end
if a_ord ~= '' then ord = a_ord end
if a_rate == '-' then
  rate, per = '-', '-'
elseif a_rate ~= '' or a_per ~= '' then
  -- The pair in force: the override's numbers, else the default's.
  local f_rate, f_per = rate, per
  if rate == '-' then f_rate, f_per = d_rate, d_per end
  if a_rate ~= '' then f_rate = a_rate end
  if a_per ~= '' then f_per = a_per end
  if n(f_rate) == 0 and a_rate == '' then
    return {'no_rate'}
  elseif n(f_rate) == 0 then
    f_per = '0'
  elseif n(f_per) == 0 then
    return {'no_period'}
  elseif n(f_per) < n(f_rate) then
    return {'too_fast', f_rate, f_per}
  end
  rate, per = f_rate, f_per
end

if group == '' then
  if a_max ~= '' then
    if n(max) > 0 then redis.call('HSET', K.limits, 'g_max_running', max)
    else redis.call('HDEL', K.limits, 'g_max_running') end
  end
  if a_rate ~= '' or a_per ~= '' then
    if n(rate) > 0 then redis.call('HSET', K.limits, 'g_rate', rate, 'g_period_ms', per)
    else redis.call('HDEL', K.limits, 'g_rate', 'g_period_ms') end
  end
  if a_ord ~= '' then
    if ord == '1' then redis.call('HSET', K.limits, 'g_ordered', '1')
    else redis.call('HDEL', K.limits, 'g_ordered') end
  end
  if n(rate) == 0 then rate, per = '0', '0' end
  redis.call('RPUSH', K.wake, '1') -- pools blocked by the old limits look again
  redis.call('LTRIM', K.wake, 0, 0)
  return {'ok', n(max) > 0 and max or '0', rate, per, ord, '0', '-', '-', '-', '-'}
end

local keep = max ~= '-' or rate ~= '-' or ord ~= '-'
if keep and not exists then
  local have = redis.call('HLEN', K.glimits)
  if have >= MAX_OVERRIDES then
    return {'too_many', tostring(have)}
  end
end
if keep then
  redis.call('HSET', K.glimits, group, max .. ' ' .. rate .. ' ' .. per .. ' ' .. ord)
elseif exists then
  redis.call('HDEL', K.glimits, group)
end
if redis.call('EXISTS', K.glimits) == 1 then
  redis.call('HSET', K.limits, 'g_overrides', '1')
else
  redis.call('HDEL', K.limits, 'g_overrides')
end
-- A group parked in the timer looks again at the next claim: its new
-- limits may let it start now (a claim that finds them still full parks
-- it again).
if redis.call('ZREM', K.gwait, group) == 1 then
  redis.call('ZADD', K.grotation, redis.call('INCR', K.seq), group)
end
redis.call('RPUSH', K.wake, '1') -- pools blocked by the old limits look again
redis.call('LTRIM', K.wake, 0, 0)
if not keep then max, rate, per, ord = '-', '-', '-', '-' end
return {'ok', d_max, d_rate, d_per, d_ord, keep and '1' or '0', max, rate, per, ord}
