-- ack: handlers succeeded; their jobs are done. One call settles many jobs
-- of a queue, so a busy pool spends a fraction of a round trip per job.
-- Guard, per job: state=running ∧ gen ∧ token (invariant 2): a stale
-- worker's late success never overwrites the attempt that replaced it.
-- A re-send of an ack whose reply was lost answers 'done' again and writes
-- nothing (invariant 9): the job still carries the claim's token, settled
-- as done.
-- ARGV[2..] (id, gen, token, result) for each job
-- Reply: per job, 'done' or 'stale'
local now = now_ms()
local out = {}
for i = 2, #ARGV, 4 do
  local id, token = ARGV[i], ARGV[i + 2]
  local key = JOB .. id
  local f = read(key, 'state', 'gen', 'token', 'settled')
  if holds(f, ARGV[i + 1], token) then
    redis.call('ZREM', K.leases, id)
    redis.call('HSET', key, 'result', ARGV[i + 3], 'settled', 'ack done')
    finish(id, key, 'done', now)
    table.insert(out, 'done')
  elseif resettled(key, f, token, 'ack') then
    table.insert(out, 'done')
  else
    event('stale_rejected', id, ARGV[i + 1], 'ack')
    table.insert(out, 'stale')
  end
end
settle_cascade(now)
return out
