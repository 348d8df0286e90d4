-- throughput: a queue's settlements per minute (count_settled in lib.lua),
-- on Redis's clock. Read-only.
-- ARGV[2] n, the number of minutes, the current one last (at most the
--     window the stats hash keeps)
-- Reply: {current minute (ms since the epoch / 60000), then (done, failed)
--         for each of the n minutes, oldest first; nil where none counted}
local n = tonumber(ARGV[2])
local m = math.floor(now_ms() / 60000)
local fields = {}
for i = m - n + 1, m do
  table.insert(fields, int(i) .. ':d')
  table.insert(fields, int(i) .. ':f')
end
local out = redis.call('HMGET', K.stats, unpack(fields))
table.insert(out, 1, m)
return out
