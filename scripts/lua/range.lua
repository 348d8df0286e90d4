-- range: a step of a listing that reads an index in steps (Broker.Jobs,
-- RetryDead, JobPage): up to n entries with their scores, just after the
-- entry (score, id) the step before read last (lib.lua's rank_after), from
-- the head or, when newest, from the end; from the head, none scored above
-- a bound. With
-- n = 0 it only finds where to go on (JobPage's cursor). Read-only; it runs
-- as a script only so that finding where to go on and reading from there
-- are one step that no other client comes between. Bounded by n
-- (invariant 8).
-- ARGV[2] state (of its index)  [3] '1' from the end, else '0'
--     [4] last score  [5] last id  [6] highest score listed ('': no bound)
--     [7] n
--     pending only: [8] where the last entry was listed among the groups,
--     '<phase> <group score> <group>' ('': among the ungrouped jobs; see
--     below)  [9] whether grouped jobs may be pending: '1', '0', or '' to
--     look (the settings' groups and g_pending)  [10] a group: list only
--     its pending jobs, its gready set, as any other index ('': all)
-- Reply: {entries in the index, rank of the first entry read, (id, score) * ...}
--     pending without [10]: {entries, rank, resume, (id, score, place) * ...},
--     place as [8]; resume '' or the place of a group the step listed to
--     its end, to go on after (see below)
local newest = ARGV[3] == '1'
local bound = ARGV[6] ~= '' and tonumber(ARGV[6])
local n = tonumber(ARGV[7])

-- Pending jobs are in three parts (lib.lua's ready index), listed as one
-- in claim order: ready_hi, ready0 from its tail, ready_lo (the reverse
-- when newest), with an earlier version's index, still to be moved,
-- left out. A ready0 entry's score in the listing is LIST_AT plus its
-- place in the list at the time of the step: from the tail, or from the
-- head when newest. The next step goes on just after it while it is
-- still where it was, or where LPOS finds it: from the tail within its
-- old place (it can only have come closer: entries leave at the tail),
-- from the head within LIST_SPAN (entries arrive there). One that is
-- gone took every older entry along, so the step goes on from the tail
-- (newest: after the list). Past LIST_SPAN, a moved entry is looked for
-- no more: the step starts the list again, repeating, never skipping. A listing
-- holds ready0's tombstones and older entries of ids filed again: the
-- reader drops jobs no longer pending, and ids it listed already.
-- Bounded by n and LIST_SPAN (invariant 8).
--
-- Grouped pending jobs (in gready:<group>) follow the ungrouped ones (come
-- first when newest): group by group, each in its own order (priority,
-- then FIFO), the groups in the order of the rotation (grotation, by turn)
-- and then of the timer (gwait, by due time). An entry's place names its
-- group and the group's score there ('r' rotation, 'w' timer), so the next
-- step goes on in the group after the entry (rank_after), and then after
-- the group where it was. A group that took its turn meanwhile has a later
-- ticket: the listing meets it again and lists it again (repeating); one
-- that moved from the timer back to the rotation while the listing reads
-- the timer is missed (the count stays exact). A step visits at most
-- n + GROUP_VISITS groups; past them (spare members with no pending job)
-- it answers the last group it finished as resume, with what it found.
-- Bounded by n and GROUP_VISITS.
if ARGV[2] == 'pending' and ARGV[10] == '' then
  local LIST_AT, LIST_SPAN, GROUP_VISITS = 100 * PRIORITY_BAND, 100000, 100
  local n0 = n
  local out = {0, 0, ''} -- the reply's size, rank and resume, then the entries
  local more = false -- something is left to list past what out holds

  -- ungrouped lists from (score, id) ('' id: from its start); it answers
  -- the three parts' size and the rank of its first entry.
  local function ungrouped(after, id)
    local parts = {{K.ready_hi}, {K.ready0, list = true}, {K.ready_lo}}
    if newest then
      parts = {parts[3], parts[2], parts[1]}
    end
    local sizes, card = {}, 0
    for i, part in ipairs(parts) do
      sizes[i] = part.list and redis.call('LLEN', part[1]) or redis.call('ZCARD', part[1])
      card = card + sizes[i]
    end
    -- Where the step starts: a part and the place in it.
    local at, from = 1, 0
    if id ~= '' then
      local score = tonumber(after)
      if score >= LIST_AT and score < LIST_AT + PRIORITY_BAND then
        at = 2
        local place = score - LIST_AT
        local found
        if place < sizes[2] then
          local i = newest and place or -(place + 1)
          if redis.call('LINDEX', K.ready0, i) == id then
            found = place
          end
        end
        if not found and newest then
          found = redis.call('LPOS', K.ready0, id, 'MAXLEN', LIST_SPAN)
        elseif not found then
          found = redis.call('LPOS', K.ready0, id, 'RANK', -1, 'MAXLEN', math.min(place + 1, LIST_SPAN))
          found = found and sizes[2] - 1 - found -- LPOS counts from the head
        end
        if found then
          from = found + 1
        elseif newest and sizes[2] <= LIST_SPAN then
          at, from = 3, 0 -- gone, with every older entry
        end
      else
        local hi = score < LIST_AT
        at = (hi ~= newest) and 1 or 3
        from = rank_after(parts[at][1], score, id, newest)
      end
    end
    local first = from
    for i = 1, at - 1 do
      first = first + sizes[i]
    end
    local listed = 0
    while n > 0 and at <= 3 do
      local part = parts[at]
      if from < sizes[at] then
        local take = math.min(n, sizes[at] - from)
        if part.list and newest then
          local ids = redis.call('LRANGE', K.ready0, from, from + take - 1)
          for j, e in ipairs(ids) do
            table.insert(out, e)
            table.insert(out, int(LIST_AT + from + j - 1))
            table.insert(out, '')
          end
        elseif part.list then
          local ids = redis.call('LRANGE', K.ready0, -(from + take), -(from + 1))
          for j = #ids, 1, -1 do
            table.insert(out, ids[j])
            table.insert(out, int(LIST_AT + from + #ids - j))
            table.insert(out, '')
          end
        else
          local entries
          if newest then
            entries = redis.call('ZREVRANGE', part[1], from, from + take - 1, 'WITHSCORES')
          else
            entries = redis.call('ZRANGE', part[1], from, from + take - 1, 'WITHSCORES')
          end
          for i = 1, #entries, 2 do
            table.insert(out, entries[i])
            table.insert(out, entries[i + 1])
            table.insert(out, '')
          end
        end
        n = n - take
        listed = listed + take
      end
      at, from = at + 1, 0
    end
    more = more or first + listed < card
    return card, first
  end

  local function zrange(key, from, to)
    if newest then
      return redis.call('ZREVRANGE', key, from, to, 'WITHSCORES')
    end
    return redis.call('ZRANGE', key, from, to, 'WITHSCORES')
  end

  -- grouped lists the groups' pending jobs from the place of the last
  -- entry (nil: from the start) and answers resume ('' or a place).
  local function grouped(place, after, id)
    if n <= 0 then
      return ''
    end
    local phases = {{K.grotation, 'r'}, {K.gwait, 'w'}}
    if newest then
      phases = {phases[2], phases[1]}
    end
    local pi, rank, cur = 1, 0, nil
    if place then
      local phase, gscore, g = string.match(place, '^(%a) (%S+) (.*)$')
      pi = (phase == phases[1][2]) and 1 or 2
      rank = rank_after(phases[pi][1], gscore, g, newest)
      if id ~= '' then
        cur = {g = g, place = place, from = rank_after(derived('gready', g), after, id, newest)}
      end
    end
    local visits, done = 0, nil
    while true do
      if cur then
        local key = derived('gready', cur.g)
        local entries = zrange(key, cur.from, cur.from + n - 1)
        for i = 1, #entries, 2 do
          table.insert(out, entries[i])
          table.insert(out, entries[i + 1])
          table.insert(out, cur.place)
        end
        n = n - #entries / 2
        if n == 0 then
          more = redis.call('ZCARD', key) > cur.from + #entries / 2
          break
        end
        done, cur = cur.place, nil
      end
      if pi > 2 then
        return ''
      end
      local m = zrange(phases[pi][1], rank, rank)
      if not m[1] then
        pi, rank = pi + 1, 0
      elseif m[1] == '' then
        rank = rank + 1 -- the ungrouped jobs' turn: not a group
      elseif visits >= n0 + GROUP_VISITS and done then
        more = true
        return done
      else
        rank = rank + 1
        visits = visits + 1
        cur = {g = m[1], place = phases[pi][2] .. ' ' .. m[2] .. ' ' .. m[1], from = 0}
      end
    end
    -- The page is full: does a group follow? (A spare member may make it
    -- say so, and the next page is then empty.)
    if not more and pi <= 2 then
      more = zrange(phases[pi][1], rank, rank)[1] ~= nil or (pi == 1 and redis.call('ZCARD', phases[2][1]) > 0)
    end
    return ''
  end

  -- Whether grouped jobs may be pending: the caller says, or the step
  -- looks, only once the ungrouped jobs are listed to their end, so that a
  -- queue without groups costs what it did before groups.
  local on = ARGV[9]
  local function groups_on()
    if on == '' then
      local f = redis.call('HMGET', K.limits, 'groups', 'g_pending')
      on = (f[1] == '1' and (tonumber(f[2]) or 1) > 0) and '1' or '0'
    end
    return on == '1'
  end
  local place, id = ARGV[8], ARGV[5]
  local resume = ''
  if (place == '' and not newest) or (id ~= '' and place == '' and newest) then
    -- Among the ungrouped jobs: while some are left, or when no group
    -- follows, the reply's size and rank are as before groups.
    local card, first = ungrouped(ARGV[4], id)
    if newest or more or not groups_on() then
      out[1], out[2] = card, first
      return out
    end
    if n > 0 then
      resume = grouped(nil, '', '')
    else
      more = true
    end
  elseif not newest then
    if groups_on() then
      resume = grouped(place, ARGV[4], id)
    end
  elseif not groups_on() then
    out[1], out[2] = ungrouped('0', '')
    return out
  else
    -- Newest: the groups first, then the ungrouped jobs from their end.
    resume = grouped(place ~= '' and place or nil, ARGV[4], id)
    if n > 0 and resume == '' then
      ungrouped('0', '')
    elseif not more then
      more = (redis.call('LLEN', K.ready0) + redis.call('ZCARD', K.ready_hi) + redis.call('ZCARD', K.ready_lo)) > 0
    end
  end
  -- The rank of an entry among the groups is not known: the reply's size
  -- says only whether more follows what it holds (JobPage's Next).
  out[1], out[3] = (#out - 3) / 3 + (more and 1 or 0), resume
  return out
end

local index = INDEX[ARGV[2]]
if ARGV[2] == 'pending' then
  index = derived('gready', ARGV[10])
end
local first = rank_after(index, ARGV[4], ARGV[5], newest)
local out = {redis.call('ZCARD', index), first}
if n < 1 then
  return out
end
local entries
if newest then
  entries = redis.call('ZREVRANGE', index, first, first + n - 1, 'WITHSCORES')
else
  entries = redis.call('ZRANGE', index, first, first + n - 1, 'WITHSCORES')
end
for i = 1, #entries, 2 do
  if bound and tonumber(entries[i + 1]) > bound then
    break
  end
  table.insert(out, entries[i])
  table.insert(out, entries[i + 1])
end
return out
