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
-- Reply: {entries in the index, rank of the first entry read, (id, score) * ...}
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
if ARGV[2] == 'pending' then
  local LIST_AT, LIST_SPAN = 100 * PRIORITY_BAND, 100000
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
  local id = ARGV[5]
  if id ~= '' then
    local score = tonumber(ARGV[4])
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
  local out = {card, first}
  while n > 0 and at <= 3 do
    local part = parts[at]
    if from < sizes[at] then
      local take = math.min(n, sizes[at] - from)
      if part.list and newest then
        local ids = redis.call('LRANGE', K.ready0, from, from + take - 1)
        for j, e in ipairs(ids) do
          table.insert(out, e)
          table.insert(out, int(LIST_AT + from + j - 1))
        end
      elseif part.list then
        local ids = redis.call('LRANGE', K.ready0, -(from + take), -(from + 1))
        for j = #ids, 1, -1 do
          table.insert(out, ids[j])
          table.insert(out, int(LIST_AT + from + #ids - j))
        end
      else
        local entries
        if newest then
          entries = redis.call('ZREVRANGE', part[1], from, from + take - 1, 'WITHSCORES')
        else
          entries = redis.call('ZRANGE', part[1], from, from + take - 1, 'WITHSCORES')
        end
        for _, e in ipairs(entries) do
          table.insert(out, e)
        end
      end
      n = n - take
    end
    at, from = at + 1, 0
  end
  return out
end

local index = INDEX[ARGV[2]]
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
