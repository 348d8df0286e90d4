-- ack: handlers succeeded; their jobs are done. One call settles many jobs
-- of a queue, so a busy pool spends a fraction of a round trip per job.
-- Guard, per job: state=running ∧ gen ∧ token (invariant 2): a stale
-- worker's late success never overwrites the attempt that replaced it.
-- ARGV[2..] (id, gen, token, result) for each job
-- Reply: per job, 'done' or 'stale'
local now = now_ms()
local out = {}
for i = 2, #ARGV, 4 do
  local id = ARGV[i]
  local key = JOB .. id
  if holds(read(key, 'state', 'gen', 'token'), ARGV[i + 1], ARGV[i + 2]) then
    redis.call('ZREM', K.leases, id)
    redis.call('HSET', key, 'result', ARGV[i + 3])
    finish(id, key, 'done', now)
    table.insert(out, 'done')
  else
    event('stale_rejected', id, ARGV[i + 1], 'ack')
    table.insert(out, 'stale')
  end
end
return out
