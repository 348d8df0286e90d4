-- progress: store a handler's progress report.
-- Guard: state=running ∧ gen ∧ token (invariant 2): a stale worker cannot
-- overwrite its successor's progress. A re-send writes the same report
-- again, or answers stale once the claim has ended.
-- ARGV[2] id  [3] gen  [4] token  [5] progress
-- Reply: {STATUS ok, 'running'} or {STATUS stale, ''}, as every settling
-- script answers (the job's state after the call)
local key = JOB .. ARGV[2]
if not holds(read(key, F.state, F.gen, F.token), ARGV[3], ARGV[4]) then
  return {STATUS.stale, ''}
end
redis.call('HSET', key, F.progress, ARGV[5])
return {STATUS.ok, 'running'}
