-- fence_hset: a side effect fenced by a job's claim, for the fence package
-- (not a queue operation, and so without lib.lua). It writes fields into a
-- hash only if no later claim of the same job has written there: the hash
-- keeps, per job, the highest generation applied.
-- KEYS[1] the hash
-- ARGV[1] the fence field ("fence:" .. job id)  [2] generation
--     [3..] field, value pairs
-- Reply: 1 applied, 0 refused (a later claim of the job wrote already)
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local gen = tonumber(ARGV[2])
if last and last > gen then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], unpack(ARGV, 3))
return 1
