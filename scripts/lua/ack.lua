-- ack: handlers succeeded; their jobs are done. One call settles many jobs
-- of a queue, so a busy pool spends a fraction of a round trip per job, and
-- it may take the pool's next jobs in the same call (take.lua), so a pool
-- that settles a job and runs the next spends one round trip on both.
-- Guard, per job: state=running ∧ gen ∧ token (invariant 2): a stale
-- worker's late success never overwrites the attempt that replaced it.
-- A re-send of an ack whose reply was lost answers ok again and writes
-- nothing (invariant 9): the job still carries the claim's token, settled
-- as done; the claim, re-sent under its request id, answers its leases.
-- The jobs this call settled count once in the minute's throughput, in one
-- HINCRBY; a re-sent or stale ack counts nothing.
-- ARGV[2] n to claim after the acks (0: claim nothing)  [3] lease_ms
--     [4] promote_limit  [5] claim request id  [6] cascade budget
--     [7..] (id, gen, token, result) for each job
-- Reply: per job, STATUS ok or stale; then, when n > 0, take's reply as
--        one nested array
local now = now_ms()
local out = {}
local settled_now = 0
-- The jobs settled here leave leases and enter done in one call each,
-- after the loop (zrem_all, zadd_all).
local done_ids = {}
local frees = {} -- group → its slots these acks free (lease_end, batched)
for i = 7, #ARGV, 4 do
  local id, token = ARGV[i], ARGV[i + 2]
  local key = JOB .. id
  -- The guard's fields, then finish()'s OWED ones, in one read.
  local f = read(key, F.state, F.gen, F.token, F.settled, F.unique_until_done, F.waited, F.has_children, F.wait_until,
    F.group)
  if holds(f, ARGV[i + 1], token) then
    finish(id, key, 'done', now, {F.result, ARGV[i + 3], F.settled, 'ack done'}, {f[2], f[5], f[6], f[7], f[8]}, done_ids)
    table.insert(out, STATUS.ok)
    settled_now = settled_now + 1
    if f[9] and f[9] ~= '' then
      frees[f[9]] = (frees[f[9]] or 0) + 1
    end
  elseif resettled(key, f, token, 'ack') then
    table.insert(out, STATUS.ok)
  else
    event('stale_rejected', id, ARGV[i + 1], 'ack')
    table.insert(out, STATUS.stale)
  end
end
zrem_all(K.leases, done_ids)
group_free(frees)
zadd_all(K.done, now, done_ids)
count_settled('d', settled_now, now)
settle_cascade(now)
local n = tonumber(ARGV[2])
if n > 0 then
  table.insert(out, take(now, tonumber(ARGV[3]), n, tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])))
end
return out
