-- browse: what a listing shows of a page of jobs (Broker.JobPage), and
-- of one job's live figures (Broker.JobListed): the fields below, and only
-- the start of last_error; never the payload, result, progress or error
-- history, so that a page of 500 jobs with payloads of 1 MiB moves a few
-- hundred KiB. Read-only, changes nothing.
-- Bounded by the page (at most PageLimitMax ids; invariant 8).
-- ARGV[2] bytes of last_error to answer  [3..] ids
-- last_error stays last: the cut below reads it at #FIELDS.
-- Reply: per id, its fields in the order of FIELDS (false where one is
--        missing); an empty list when the job is gone, {false} when its
--        key is not a hash (Check reports those).
local FIELDS = {F.kind, F.state, F.attempt, F.max_attempts, F.gen, F.priority, F.run_at, F.lease_until,
  F.created_at, F.claimed_at, F.finished_at, F.cancel, F.renewals, F.group, F.last_error}
local cut = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local f = redis.pcall('HMGET', JOB .. ARGV[i], unpack(FIELDS))
  if f.err then
    table.insert(out, {false})
  elseif not f[1] and not f[2] then
    table.insert(out, {})
  else
    local e = f[#FIELDS]
    if e and #e > cut then
      f[#FIELDS] = string.sub(e, 1, cut)
    end
    table.insert(out, f)
  end
end
return out
