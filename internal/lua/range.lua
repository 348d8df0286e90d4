-- range: one step, after the first, of a listing that reads an index in
-- steps (Broker.Jobs, RetryDead): up to n entries with their scores, just
-- after the entry (score, id) the step before read last (lib.lua's
-- rank_after), none scored above a bound. Read-only; it runs as a script
-- only so that finding where to go on and reading from there are one step
-- that no other client comes between. Bounded by n (invariant 8).
-- ARGV[2] state (of its index)  [3] last score  [4] last id
--     [5] highest score listed ('': no bound)  [6] n
-- Reply: {(id, score) * ...}
local index = INDEX[ARGV[2]]
local bound = ARGV[5] ~= '' and tonumber(ARGV[5])
local first = rank_after(index, ARGV[3], ARGV[4])
local entries = redis.call('ZRANGE', index, first, first + tonumber(ARGV[6]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #entries, 2 do
  if bound and tonumber(entries[i + 1]) > bound then
    break
  end
  table.insert(out, entries[i])
  table.insert(out, entries[i + 1])
end
return out
