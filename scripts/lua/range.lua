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
local index = INDEX[ARGV[2]]
local newest = ARGV[3] == '1'
local bound = ARGV[6] ~= '' and tonumber(ARGV[6])
local n = tonumber(ARGV[7])
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
