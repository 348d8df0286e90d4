-- take.lua: the claim, as a function a script can run after its own work
-- (claim.lua runs only it; ack.lua runs it after its settlements, so a pool
-- settles and takes its next jobs in one round trip). Loaded after lib.lua.
--
-- take settles a bounded step of the dependents cascade, promotes due
-- scheduled jobs (bounded), then takes up to n ready jobs, unless the queue
-- is paused, within the queue's limits. The flags of the settings hash
-- (lib.lua's set_flag) say when there is no cascade, no scheduled job due
-- and no pause, so that a queue without them is not read for them.
-- Guard: none from the caller; a popped job is claimed only if its hash says
-- pending. Each claim draws a new gen from the queue's counter and installs
-- a fresh token, which makes it the one valid claim (invariants 1, 3 and
-- 10); the job moves from ready to leases (invariant 6).
-- Safe to re-send (invariant 9): the ids a request took are kept under its
-- token base for the lease's length, and a request that finds them answers
-- the same leases (those its tokens still hold) and changes nothing. A
-- request that took nothing leaves an empty record, so a send of it that
-- arrives later (the original, after its re-ask found nothing ready)
-- takes nothing either: no job is claimed under a token nobody learns. A
-- late send comes within lib.lua's RESEND_HORIZON_MS, so the empty record
-- lasts min(lease, horizon): an idle pool's keys stay few.
-- now is the caller's Redis time (one TIME per script call), or nil for
-- take to read it; base is the token base, unique per request (token of
-- the i-th claimed job = base .. '.' .. i); budget is the cascade step's.
-- Answers {now, next_due_ms (-1 when nothing is scheduled; the time until
--   the rate limit frees a start, when that is sooner and jobs wait), njobs,
--   (a claimed job's values, in CLAIM_REPLY's order: claim_reply) * njobs,
--   (id, problem) * ...}

-- claim_reply appends one claimed job to a claim's reply out: job's values
-- (a table by name: the id and the fields the claim left; group '' when
-- none; meta '' when none, else a JSON object of strings, at most
-- MaxMetadataBytes and a trace context, and its quoting, checked by
-- bad_meta before it is handed out),
-- in the order of CLAIM_REPLY, the one broker/fields.go writes and
-- readClaim reads by. A value missing is an error, not a shifted reply.
local function claim_reply(out, job)
  local n = #out
  for i, name in ipairs(CLAIM_REPLY) do
    local v = job[name]
    if v == nil then
      error('fenceq: claim reply has no ' .. name)
    end
    out[n + i] = v
  end
end

local function take(now, lease_ms, n, promote_limit, base, budget)
  now = now or now_ms()
  local asked = n -- before the limits cut it
  local problems = {}
  local out = {now, -1, 0}
  local record = derived('claim', base)

  -- next_due fills in when the caller should look again: when the first
  -- scheduled job falls due, as sched_min bounds it (a bound that is low
  -- only brings the caller back early, to a claim that looks).
  local function next_due(limited_for)
    local sm = setting('sched_min')
    local first = is_int(sm) and tonumber(sm)
    if not first and sm ~= 'none' then
      first = tonumber(redis.call('ZRANGE', K.scheduled, 0, 0, 'WITHSCORES')[2])
    end
    if first then
      out[2] = math.max(0, first - now)
    end
    if limited_for >= 0 and ready_any() and (out[2] < 0 or limited_for < out[2]) then
      out[2] = limited_for -- come back when the rate limit lets a job start
    end
  end

  -- answer answers the leases of the request's record, taken.
  local function answer(taken)
    local i, claimed = 0, 0
    for id in string.gmatch(taken, '[^\n]+') do
      i = i + 1
      local token = base .. '.' .. i
      local f = read(JOB .. id, F.state, F.kind, F.payload, F.attempt, F.max_attempts, F.gen, F.token, F.lease_until,
        F.meta, F.group)
      -- A lease whose numbers a hand edit broke since is left out of the
      -- answer, as one its token no longer holds: its lease runs out and
      -- the reaper marks the job, where an error here would refuse the
      -- whole re-send.
      local attempt, max_attempts, gen, until_ms = tonumber(f and f[4]), tonumber(f and f[5]),
        tonumber(f and f[6]), tonumber(f and f[8])
      if f and f[1] == 'running' and f[7] == token and attempt and max_attempts and gen and until_ms then
        claimed = claimed + 1
        claim_reply(out, {id = id, [F.kind] = f[2], [F.payload] = f[3], [F.attempt] = attempt,
          [F.max_attempts] = max_attempts, [F.gen] = gen, [F.token] = token,
          [F.lease_until] = until_ms, [F.meta] = f[9] or '', [F.group] = f[10] or ''})
      end
    end
    out[3] = claimed
    next_due(-1)
    return out
  end

  local taken = redis.call('GET', record)
  if taken then
    return answer(taken)
  end

  -- Every RECHECK_MS a claim reads the structures the flags mirror,
  -- whatever the flags say, and rewrites the flags from them.
  local recheck = not is_int(setting('recheck_at')) or tonumber(setting('recheck_at')) <= now
  if recheck then
    set_flag('recheck_at', int(now + RECHECK_MS))
    -- The ready index's flags say where pending jobs may be; absent, a
    -- claim would not look there: restore one the hash lost.
    for _, part in ipairs({{'hi', K.ready_hi}, {'lo', K.ready_lo}, {'legacy', LEGACY_READY}}) do
      if not setting(part[1]) and redis.call('EXISTS', part[2]) == 1 then
        set_setting(part[1], 1)
      end
    end
  end

  if (recheck or setting('cascade') ~= '0') and cascade_step(budget, now) then
    wake() -- more to settle: the next claim takes the next step
  end

  -- Due scheduled jobs, when sched_min does not rule them out; the bound
  -- is then rewritten as the first score left (an exact bound).
  local sm = setting('sched_min')
  if recheck or not (sm == 'none' or is_int(sm) and tonumber(sm) > now) then
    local due = redis.call('ZRANGEBYSCORE', K.scheduled, '-inf', now, 'LIMIT', 0, promote_limit)
    for _, id in ipairs(due) do
      local key = JOB .. id
      redis.call('ZREM', K.scheduled, id)
      local f = read(key, F.state, F.priority)
      if f and f[1] == 'scheduled' then
        to_ready(id, key, f[2])
      else
        misfiled(id, key, 'scheduled', problems, now)
      end
    end
    local first = redis.call('ZRANGE', K.scheduled, 0, 0, 'WITHSCORES')[2]
    set_flag('sched_min', first and int(math.floor(tonumber(first))) or 'none')
  end

  -- Flow control (broker.SetLimits), the same for every pool: at most
  -- max_running jobs running at once, at most rate starts per period_ms.
  -- limited_for is how long until the rate limit lets a job start, when it
  -- is what stops this claim.
  local limited_for = -1
  local max_running, rate, period = setting('max_running'), setting('rate'), setting('period_ms')
  if max_running then
    n = math.min(n, math.max(0, max_running - redis.call('ZCARD', K.leases)))
  end
  if rate and period and n > 0 then
    redis.call('ZREMRANGEBYSCORE', K.starts, '-inf', now - period)
    local left = rate - redis.call('ZCARD', K.starts)
    if left < 1 then
      local oldest = redis.call('ZRANGE', K.starts, 0, 0, 'WITHSCORES')
      limited_for = math.max(1, tonumber(oldest[2]) + period - now)
    end
    n = math.max(0, math.min(n, left))
  end

  local until_ms = now + lease_ms
  local claimed = 0
  local skipped = false -- tombstones popped: the list may hold jobs past them
  local ids = {}
  -- Paused: the flag, or the key itself when the flag is unreadable or
  -- this claim rechecks (even one that would take nothing).
  local paused = setting('paused')
  if (n > 0 or recheck) and (recheck or (paused ~= '0' and paused ~= '1')) then
    paused = redis.call('EXISTS', K.paused) == 1 and '1' or '0'
    set_flag('paused', paused)
  end
  if n > 0 and paused == '0' then
    ready_migrate(problems, now)
    -- One INCRBY per part of the ready index popped reserves its
    -- generations; a job whose own gen is above the reserve (written
    -- before the counter existed) takes the slow path, next_gen, and so
    -- does every job after it in the batch.
    local reserved, next_reserved = 0, 1
    local function claim_gen(current)
      local c = tonumber(current) or 0
      if next_reserved <= reserved and c < next_reserved then
        next_reserved = next_reserved + 1
        return next_reserved - 1
      end
      next_reserved = reserved + 1
      return next_gen(current)
    end
    for _, source in ipairs(ready_sources()) do
      if claimed >= n then
        break
      end
      local popped = ready_pop(source, n - claimed)
      if #popped > 0 then
        reserved = redis.call('INCRBY', K.gen, #popped)
        next_reserved = reserved - #popped + 1
      end
      local dead = 0
      for i, id in ipairs(popped) do
        if claimed >= n then
          ready_unpop(popped, i) -- popped past the tombstones there were
          break
        end
        local key = JOB .. id
        local f, bad = read(key, F.state, F.kind, F.payload, F.attempt, F.max_attempts, F.gen, F.token, F.settled, F.meta,
          F.prev_settled, F.prev_settled_2, F.priority, F.group)
        if source == 'list' and not bad and (not f or INDEX[f[1]] and not ready_live(f[1], f[12])) then
          dead = dead + 1 -- a tombstone, or an id filed again since: skipped
        elseif not f or f[1] ~= 'pending' then
          misfiled(id, key, 'ready', problems, now)
        else
          local bad = bad_int(f, 4, {F.attempt, F.max_attempts, F.gen})
          if not bad and (not f[2] or f[2] == '') then
            bad = 'field kind is missing'
          elseif not bad and not f[3] then
            bad = 'field payload is missing'
          elseif not bad then
            bad = bad_meta(f[9])
          end
          if bad then
            corrupt(id, key, bad, problems, now)
          else
            claimed = claimed + 1
            local token = base .. '.' .. claimed
            local attempt, gen = tonumber(f[4]) + 1, claim_gen(f[6])
            local fields = {F.state, 'running', F.gen, int(gen), F.token, token,
              F.attempt, int(attempt), F.lease_until, int(until_ms), F.claimed_at, now, F.renewals, 0}
            if f[8] and f[8] ~= '' and f[7] and f[7] ~= '' then
              -- The last settlement's record moves aside, for its re-send; a
              -- claim that never settled (reaped, force-released) left none,
              -- and the ones before it stay. A first claim writes neither.
              table.insert(fields, F.settled)
              table.insert(fields, '')
              set_aside(fields, f[7] .. ' ' .. f[8], f[10], f[11])
            end
            redis.call('HSET', key, unpack(fields))
            if rate and period then
              redis.call('ZADD', K.starts, now, token)
              redis.call('PEXPIRE', K.starts, period)
            end
            event('started', id, gen, 'attempt ' .. attempt)
            table.insert(ids, id)
            claim_reply(out, {id = id, [F.kind] = f[2], [F.payload] = f[3], [F.attempt] = attempt,
              [F.max_attempts] = tonumber(f[5]), [F.gen] = gen, [F.token] = token, [F.lease_until] = until_ms,
              [F.meta] = f[9] or '', [F.group] = f[13] or ''})
          end
        end
      end
      if source == 'list' then
        ready_popped(dead)
        skipped = skipped or dead > 0
      end
    end
  end
  -- The claimed jobs enter leases in one call (invariant 6 holds: the
  -- script is atomic).
  zadd_all(K.leases, int(until_ms), ids)
  out[3] = claimed
  if asked > 0 then
    -- An empty record has only a late send of the request to stop, which
    -- comes within the re-send horizon: it is kept no longer.
    local keep = #ids > 0 and lease_ms or math.min(lease_ms, RESEND_HORIZON_MS)
    redis.call('SET', record, table.concat(ids, '\n'), 'PX', keep)
  end

  -- Chain the wake-up: work left behind wakes the next blocked worker. A
  -- token already waiting wakes one, so ready's size is read only when
  -- there is none (the same tokens as wake() after it). A claim that
  -- skipped tombstones chains it too, even one that took nothing: it may
  -- have stopped at TOMB_SKIP with pending jobs behind them.
  if (claimed > 0 or skipped) and redis.call('LLEN', K.wake) == 0 and ready_any() then
    redis.call('RPUSH', K.wake, '1')
  end
  next_due(limited_for)

  for _, v in ipairs(problems) do
    table.insert(out, v)
  end
  return out
end
