-- retry: an operator sends dead or cancelled jobs back to run again, with a
-- fresh attempt budget and, if a pool gives it back for want of a handler,
-- a fresh wait for one (fail.lua). last_error is kept as a record.
-- Guard: the job is dead or cancelled; any other state is left alone. A job
-- goes back only as enqueue would let it in: a job that never left blocked
-- waits again for its dependencies (refused when one is missing, or ended
-- dead or cancelled and the job does not run anyway), and a job whose
-- unique key (held until done) another live job took meanwhile is refused.
-- A retried job gets a new gen (invariant 3), is due from now (run_at) and
-- moves to ready or blocked (invariant 6). A re-send with the same nonce
-- answers what the first call did and changes nothing (invariant 9): it
-- finds the record this call leaves under derived('retrysent', nonce) for
-- RESEND_HORIZON_MS, a hash of id → "<state before> <new state>" (the
-- request's own, so another Retry of the job in between, which leaves its
-- own, never hides it), or, for a call of an earlier version, the job's
-- field 'retried'.
-- ARGV[2] request nonce  [3..] ids
-- Reply: per id, (status, state before the call, detail): STATUS ok and
--         the new state ('pending' or 'blocked'); not_retryable when the job
--         was not dead or cancelled; refused and why; missing (an entry
--         in dead is dropped); or corrupt
--         (no state) and the reason.
local nonce = ARGV[2]
local now = now_ms()
local out = {}
local record = derived('retrysent', nonce)
local recorded = {} -- id, "<state before> <new state>", for the record
local kept = redis.pcall('HMGET', record, unpack(ARGV, 3))
if kept.err then
  kept = {} -- not a hash (a hand edit): no record, as if expired
end
local function answer(status, prev, detail)
  table.insert(out, status)
  table.insert(out, prev)
  table.insert(out, detail)
end
for i = 3, #ARGV do
  local id = ARGV[i]
  local key = JOB .. id
  local f, bad = read(key, F.state, F.priority, F.retried, F.gen, F.depends_on, F.on_parent_failure,
    F.blocked_on, F.unique_until_done, F.token, F.settled, F.prev_settled, F.prev_settled_2, F.group)
  local before = kept[i - 2] or (f and f[3] and string.sub(f[3], 1, #nonce + 1) == nonce .. ' ' and string.sub(f[3], #nonce + 2))
  if bad then
    answer(STATUS.corrupt, '', bad)
  elseif not f then
    -- Listed in dead with no hash, it holds nothing to lose (lib.lua's
    -- misfiled): the entry goes, so RetryDead never meets it again.
    redis.call('ZREM', K.dead, id)
    answer(STATUS.missing, '', '')
  elseif before then
    answer(STATUS.ok, string.match(before, '^(%S+) (%S+)$'))
  elseif f[1] ~= 'dead' and f[1] ~= 'cancelled' then
    answer(STATUS.not_retryable, f[1], '')
  else
    local refused, open = nil, {}
    if (tonumber(f[7]) or 0) > 0 and f[5] then
      local ok, deps = pcall(cjson.decode, f[5])
      if ok and type(deps) == 'table' then
        for _, d in ipairs(deps) do
          ok = ok and type(d) == 'string'
        end
      end
      if not ok or type(deps) ~= 'table' then
        refused = 'its depends_on field is not a JSON list of job ids'
      else
        local o, failed, missing = dependencies(deps, f[6])
        if missing then
          refused = 'dependency ' .. missing .. ' does not exist'
        elseif failed then
          refused = 'dependency ' .. failed
        else
          open = o
        end
      end
    end
    if not refused and f[8] then
      local holder = unique_holder(f[8])
      if holder and holder ~= id then
        refused = 'its unique key is held by job ' .. holder
      end
    end
    if refused then
      answer(STATUS.refused, f[1], refused)
    else
      redis.call('ZREM', INDEX[f[1]], id)
      -- Due from now: "due since" and the oldest pending age count from
      -- the retry, not from the first run_at.
      local fields = {F.gen, int(next_gen(f[4])), F.attempt, 0, F.token, '', F.settled, '', F.run_at, int(now)}
      if f[9] and f[9] ~= '' and f[10] and f[10] ~= '' then
        -- The last settlement's record moves aside, for its re-send.
        set_aside(fields, f[9] .. ' ' .. f[10], f[11], f[12])
      end
      redis.call('HSET', key, unpack(fields))
      redis.call('HDEL', key, F.finished_at, F.cancel, F.lease_until, F.unhandled_since) -- a new wait for a handler
      if f[8] then
        redis.call('SET', f[8], id)
      end
      local state = 'pending'
      if #open > 0 then
        state = 'blocked'
        block(id, key, open, now)
      else
        redis.call('HSET', key, F.blocked_on, 0) -- its dependencies are met
        to_ready(id, key, f[2], false, f[13], now)
      end
      redis.call('HSET', key, F.retried, nonce .. ' ' .. f[1] .. ' ' .. state)
      table.insert(recorded, id)
      table.insert(recorded, f[1] .. ' ' .. state)
      answer(STATUS.ok, f[1], state)
    end
  end
end
if #recorded > 0 then
  call_chunked('HSET', record, recorded, 2)
  redis.call('PEXPIRE', record, RESEND_HORIZON_MS)
end
return out
