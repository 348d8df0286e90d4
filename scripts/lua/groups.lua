-- groups: the read side of a queue's job groups (Inspector.Groups), in
-- two modes. Read-only, changes nothing.
--
-- 'scan' reads one step of the groups that have state: up to n members of
-- grotation or gwait (by turn or due time, going on after the member the
-- step before read last, lib.lua's rank_after), or one HSCAN step of
-- grunning's fields (COUNT n), with each group's ready backlog. Member ""
-- (the turn of the ungrouped jobs) is not a group and is left out.
-- ARGV[2] 'scan'  [3] 'rotation', 'wait' or 'running'
--     [4] rotation, wait: the last score read ('' from the head); running:
--         the HSCAN cursor  [5] rotation, wait: the last member read
--     [6] n (the caller keeps it at most 1000)
-- Reply: {where the next step goes on: rotation, wait: the last score read
--         ('' when the set ends here); running: the cursor ('0' at the end),
--         the last member read (rotation, wait),
--         (group, ready) * ...}
--
-- 'detail' reads what a listing shows of named groups: for each, its
-- running count, ready backlog, override (glimits), its place in the turn
-- (grotation) and in the timer (gwait), and its held id (ghold); and the
-- queue's group defaults and its ungrouped pending count.
-- ARGV[2] 'detail'  [3..] groups (the caller sends at most 500)
-- Reply: {g_max_running, g_rate, g_period_ms, g_ordered (false where
--         absent), ungrouped pending count,
--         per group: running (false: none), ready, override (false: none),
--         grotation score (false: not in the turn), gwait score (false: not
--         waiting), held id (false: none)}
-- Bounded by n or the groups named (invariant 8).
local mode = ARGV[2]

if mode == 'scan' then
  local source, n = ARGV[3], tonumber(ARGV[6])
  local names, out = {}, {}
  if source == 'running' then
    local r = redis.call('HSCAN', K.grunning, ARGV[4], 'COUNT', n)
    out = {r[1], ''}
    for i = 1, #r[2], 2 do
      table.insert(names, r[2][i])
    end
  else
    local index = source == 'rotation' and K.grotation or K.gwait
    local from = 0
    if ARGV[4] ~= '' then
      from = rank_after(index, ARGV[4], ARGV[5], false)
    end
    local entries = redis.call('ZRANGE', index, from, from + n - 1, 'WITHSCORES')
    out = {'', ''}
    if #entries == 2 * n then
      out = {entries[#entries], entries[#entries - 1]}
    end
    for i = 1, #entries, 2 do
      table.insert(names, entries[i])
    end
  end
  for _, g in ipairs(names) do
    if g ~= '' then
      table.insert(out, g)
      table.insert(out, redis.call('ZCARD', derived('gready', g)))
    end
  end
  return out
end

local groups = {}
for i = 3, #ARGV do
  table.insert(groups, ARGV[i])
end
local d = redis.call('HMGET', K.limits, 'g_max_running', 'g_rate', 'g_period_ms', 'g_ordered')
local out = {d[1], d[2], d[3], d[4], ready_count() - setting('g_pending')}
if #groups == 0 then
  return out
end
local running = redis.call('HMGET', K.grunning, unpack(groups))
local over = redis.call('HMGET', K.glimits, unpack(groups))
local held = redis.call('HMGET', K.ghold, unpack(groups))
local turn = redis.call('ZMSCORE', K.grotation, unpack(groups))
local wait = redis.call('ZMSCORE', K.gwait, unpack(groups))
for i, g in ipairs(groups) do
  table.insert(out, running[i])
  table.insert(out, redis.call('ZCARD', derived('gready', g)))
  table.insert(out, over[i])
  table.insert(out, turn[i])
  table.insert(out, wait[i])
  table.insert(out, held[i])
end
return out
