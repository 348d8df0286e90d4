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

-- GROUP_PROMOTE bounds the groups one claim moves from the timer (gwait)
-- back to the rotation; GROUP_ROUNDS the rotation's pops per claim, and
-- GROUP_SKIP the groups a claim may pop and find unable to start (a spare
-- entry, a limit lowered since): a claim's work does not grow with the
-- number of groups or any group's backlog (invariant 8).
local GROUP_PROMOTE, GROUP_ROUNDS, GROUP_SKIP = 100, 3, 64

-- groups_recheck, every RECHECK_MS: the flag 'groups' goes off when no
-- group has pending or running jobs (the rotation holds at most the
-- ungrouped turn, the timer and grunning are empty), so a queue that
-- stops using groups is back to the ungrouped path; and comes back on if
-- a hand edit lost it while groups wait. The ungrouped jobs' turn is
-- restored if it went missing.
local function groups_recheck()
  if setting('groups') == '1' then
    local turns = redis.call('ZCARD', K.grotation)
    if turns <= 1 and (turns == 0 or redis.call('ZSCORE', K.grotation, '')) and redis.call('EXISTS', K.gwait) == 0
      and redis.call('EXISTS', K.grunning) == 0 then
      redis.call('ZREM', K.grotation, '')
      redis.call('HDEL', K.limits, 'groups', 'g_pending', 'gwait_min')
      settings.groups, settings.g_pending, settings.gwait_min = nil, 0, nil
    elseif ready_any() then
      rotate_in('')
    end
  elseif redis.call('EXISTS', K.grotation) == 1 or redis.call('EXISTS', K.gwait) == 1 then
    groups_on()
  end
end

-- take_groups claims up to n jobs, taking turns over the groups of the
-- rotation: each popped group may start as many as its limits allow
-- (max running less its running count; one per spacing of its rate; an
-- ordered group one, and the job it holds for first), and the slots are
-- dealt one at a time over the groups that may start, in turn order, so a
-- group's backlog delays only itself. A group that starts jobs and may
-- have more goes to the back of the rotation; one that may not start now
-- waits in gwait, the timer, until its time to look again (its rate's
-- next start, its held retry's run_at, or, full, the end of this claim's
-- lease: a safety net, since the end of one of its leases brings it back
-- at once). A group found empty leaves the rotation. c holds the claim's
-- own steps (take): claimed(), reserve(k), start(id, key, f), read(key),
-- ungrouped(k) and counts (group → jobs claimed).
local function take_groups(now, n, until_ms, recheck, problems, c)
  -- The timer, when gwait_min does not rule it out; the bound is then
  -- rewritten as the first score left (exact).
  local gm = setting('gwait_min')
  if recheck or not (gm == 'none' or is_int(gm) and tonumber(gm) > now) then
    local due = redis.call('ZRANGEBYSCORE', K.gwait, '-inf', now, 'LIMIT', 0, GROUP_PROMOTE)
    if #due > 0 then
      zrem_all(K.gwait, due)
      local t = redis.call('INCRBY', K.seq, #due) - #due
      local args = {}
      for i, g in ipairs(due) do
        table.insert(args, t + i)
        table.insert(args, g)
      end
      redis.call('ZADD', K.grotation, 'NX', unpack(args))
    end
    local first = redis.call('ZRANGE', K.gwait, 0, 0, 'WITHSCORES')[2]
    set_flag('gwait_min', first and int(math.floor(tonumber(first))) or 'none')
  end

  local refile, park = {}, {} -- groups for the back of the rotation; (score, group) for gwait
  local running = {} -- group → its count as read this claim
  local unhold = {} -- ordered groups whose held job this claim took or dropped
  local pulled = 0 -- jobs taken out of the groups' sets
  local rounds, skips = 0, 0
  -- A round pops at most BATCH_CHUNK groups: a claim of more takes as
  -- many more rounds.
  local max_rounds = GROUP_ROUNDS + math.floor(n / BATCH_CHUNK)
  while c.claimed() < n and rounds < max_rounds and skips <= GROUP_SKIP do
    rounds = rounds + 1
    local popped = redis.call('ZPOPMIN', K.grotation, math.min(n - c.claimed(), BATCH_CHUNK))
    if #popped == 0 then
      break
    end
    local members, named = {}, {}
    for i = 1, #popped, 2 do
      table.insert(members, popped[i])
      if popped[i] ~= '' then
        table.insert(named, popped[i])
      end
    end
    -- One read of each kind for the round's groups.
    local lim, rated, ordered = {}, {}, {}
    if #named > 0 then
      local r = redis.call('HMGET', K.grunning, unpack(named))
      local o = setting('g_overrides') == '1' and redis.call('HMGET', K.glimits, unpack(named)) or {}
      for i, g in ipairs(named) do
        -- The count as first read; this claim's own starts are in counts.
        running[g] = running[g] or tonumber(r[i]) or 0
        local max, rate, per, ord = group_limits(o[i])
        lim[g] = {max = max, rate = rate, per = per}
        if rate then
          table.insert(rated, g)
        end
        if ord then
          table.insert(ordered, g)
        end
      end
    end
    if #rated > 0 then
      local keys = {}
      for i, g in ipairs(rated) do
        keys[i] = derived('grate', g)
      end
      local v = redis.call('MGET', unpack(keys))
      for i, g in ipairs(rated) do
        lim[g].last = tonumber(v[i])
      end
    end
    if #ordered > 0 then
      local v = redis.call('HMGET', K.ghold, unpack(ordered))
      for i, g in ipairs(ordered) do
        lim[g].hold = v[i] or nil
      end
    end

    -- What each group may start now; the others wait.
    local allow, eligible = {}, {}
    for _, g in ipairs(members) do
      local a, at = n, nil
      local l = lim[g]
      if l then
        if l.max then
          a = math.max(0, l.max - running[g] - (c.counts[g] or 0))
          at = a == 0 and until_ms or nil
        end
        if l.rate and a > 0 then
          a = 1
          local next_start = l.last and l.last + group_spacing(l.rate, l.per)
          if next_start and next_start > now then
            a, at = 0, next_start
          end
        end
      end
      if a > 0 then
        allow[g] = a
        table.insert(eligible, g)
      else
        table.insert(park, int(at))
        table.insert(park, g)
        skips = skips + 1
      end
    end

    -- The slots, dealt one at a time over the groups in turn order.
    local share, left, open = {}, n - c.claimed(), eligible
    while left > 0 and #open > 0 do
      local still = {}
      for _, g in ipairs(open) do
        if left > 0 then
          share[g] = (share[g] or 0) + 1
          left = left - 1
        end
        if share[g] and share[g] < allow[g] then
          table.insert(still, g)
        end
      end
      open = still
    end

    local dealt = 0
    for _, g in ipairs(named) do
      dealt = dealt + (share[g] or 0)
    end
    c.reserve(dealt)
    for _, g in ipairs(eligible) do
      local k = share[g]
      if g ~= '' and k then
        local l, ids, got, wait = lim[g], {}, 0, nil
        local ready = derived('gready', g)
        if l.hold then
          -- An ordered group runs the job it holds for before any other.
          local h = read(JOB .. l.hold, F.state, F.group, F.run_at)
          if h and h[2] == g and h[1] == 'scheduled' then
            wait = tonumber(h[3]) or now
          elseif h and h[2] == g and h[1] == 'pending' and redis.call('ZREM', ready, l.hold) == 1 then
            ids = {l.hold}
            table.insert(unhold, g)
          else
            -- Not a job of the group waiting to run (it ended, or the group
            -- was not ordered when it ended): the group goes on without it.
            table.insert(unhold, g)
          end
        end
        if not wait and #ids == 0 then
          local p = redis.call('ZPOPMIN', ready, k)
          for i = 1, #p, 2 do
            table.insert(ids, p[i])
          end
        end
        pulled = pulled + #ids
        for _, id in ipairs(ids) do
          local key = JOB .. id
          local f = c.read(key)
          if not f or f[1] ~= 'pending' or f[13] ~= g then
            misfiled(id, key, 'group ' .. g, problems, now)
          elseif c.start(id, key, f) then
            got = got + 1
          end
        end
        if got > 0 and l.rate then
          redis.call('SET', derived('grate', g), now, 'PX', group_spacing(l.rate, l.per))
        end
        if wait then
          table.insert(park, int(wait))
          table.insert(park, g)
        elseif #ids >= k then -- it may have more
          if l.max and running[g] + (c.counts[g] or 0) >= l.max then
            table.insert(park, int(until_ms))
            table.insert(park, g)
          elseif got > 0 and l.rate then
            table.insert(park, int(now + group_spacing(l.rate, l.per)))
            table.insert(park, g)
          else
            table.insert(refile, g)
          end
        end
      end
    end
    if share[''] then
      c.ungrouped(share[''])
      if ready_any() then
        table.insert(refile, '')
      end
    end
    -- The groups that may have more go to the back of the rotation now,
    -- so the next round takes them again after the others.
    if #refile > 0 then
      local t = redis.call('INCRBY', K.seq, #refile) - #refile
      local args = {}
      for i, g in ipairs(refile) do
        table.insert(args, t + i)
        table.insert(args, g)
      end
      redis.call('ZADD', K.grotation, unpack(args))
      refile = {}
    end
  end

  -- The round's writes, one call each.
  local set = {}
  for g, k in pairs(c.counts) do
    if running[g] then
      table.insert(set, g)
      table.insert(set, int(running[g] + k))
    else
      redis.call('HINCRBY', K.grunning, g, k) -- a job filed before the queue had groups
    end
  end
  call_chunked('HSET', K.grunning, set, 2)
  call_chunked('HDEL', K.ghold, unhold, 1)
  if pulled > 0 then
    redis.call('HINCRBY', K.limits, 'g_pending', -pulled)
    settings.g_pending = math.max(0, settings.g_pending - pulled)
  end
  if #park > 0 then
    call_chunked('ZADD', K.gwait, park, 2)
    local low
    for i = 1, #park, 2 do
      local at = tonumber(park[i])
      low = (not low or at < low) and at or low
    end
    gwait_lower(low)
  end
  -- Cut short by its bounds with slots left: the rotation may hold more.
  return c.claimed() < n and (rounds >= max_rounds or skips > GROUP_SKIP)
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
    local gm = setting('groups') == '1' and setting('gwait_min')
    if gm and is_int(gm) then
      local wait = math.max(0, tonumber(gm) - now) -- a parked group's time to look again
      if out[2] < 0 or wait < out[2] then
        out[2] = wait
      end
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
    groups_recheck()
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
      local f = read(key, F.state, F.priority, F.group)
      if f and f[1] == 'scheduled' then
        to_ready(id, key, f[2], false, f[3], now)
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
  local grouped = setting('groups') == '1'
  -- Paused: the flag, or the key itself when the flag is unreadable or
  -- this claim rechecks (even one that would take nothing).
  local paused = setting('paused')
  if (n > 0 or recheck) and (recheck or (paused ~= '0' and paused ~= '1')) then
    paused = redis.call('EXISTS', K.paused) == 1 and '1' or '0'
    set_flag('paused', paused)
  end
  if n > 0 and paused == '0' then
    ready_migrate(problems, now)
    -- One INCRBY per part of the ready index popped (per round of groups)
    -- reserves its generations; a job whose own gen is above the reserve
    -- (written before the counter existed) takes the slow path, next_gen,
    -- and so does every job after it in the batch.
    local reserved, next_reserved = 0, 1
    local function reserve(k)
      if k > 0 then
        reserved = redis.call('INCRBY', K.gen, k)
        next_reserved = reserved - k + 1
      end
    end
    local function claim_gen(current)
      local c = tonumber(current) or 0
      if next_reserved <= reserved and c < next_reserved then
        next_reserved = next_reserved + 1
        return next_reserved - 1
      end
      next_reserved = reserved + 1
      return next_gen(current)
    end
    -- counts: group → jobs of it claimed here, for grunning (invariant 11).
    local counts = {}

    -- start claims a popped pending job, read as f (the fields below); it
    -- answers whether it did (a corrupt one is marked dead instead).
    local function start(id, key, f)
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
        return false
      end
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
      local g = f[13] or ''
      if g ~= '' then
        counts[g] = (counts[g] or 0) + 1
      end
      event('started', id, gen, 'attempt ' .. attempt)
      table.insert(ids, id)
      claim_reply(out, {id = id, [F.kind] = f[2], [F.payload] = f[3], [F.attempt] = attempt,
        [F.max_attempts] = tonumber(f[5]), [F.gen] = gen, [F.token] = token, [F.lease_until] = until_ms,
        [F.meta] = f[9] or '', [F.group] = g})
      return true
    end
    local function read_popped(key)
      return read(key, F.state, F.kind, F.payload, F.attempt, F.max_attempts, F.gen, F.token, F.settled, F.meta,
        F.prev_settled, F.prev_settled_2, F.priority, F.group)
    end

    -- take_ungrouped claims up to k jobs of the ready index (the jobs
    -- without a group, and any filed there before the queue had groups),
    -- by priority, then FIFO, and answers how many.
    local function take_ungrouped(k)
      local got = 0
      for _, source in ipairs(ready_sources()) do
        if got >= k then
          break
        end
        local popped = ready_pop(source, k - got)
        reserve(#popped)
        local dead = 0
        for i, id in ipairs(popped) do
          if got >= k then
            ready_unpop(popped, i) -- popped past the tombstones there were
            break
          end
          local key = JOB .. id
          local f, bad = read_popped(key)
          if source == 'list' and not bad and (not f or INDEX[f[1]] and not ready_live(f[1], f[12])) then
            dead = dead + 1 -- a tombstone, or an id filed again since: skipped
          elseif not f or f[1] ~= 'pending' then
            misfiled(id, key, 'ready', problems, now)
          elseif start(id, key, f) then
            got = got + 1
          end
        end
        if source == 'list' then
          ready_popped(dead)
          skipped = skipped or dead > 0
        end
      end
      return got
    end

    if grouped then
      skipped = take_groups(now, n, until_ms, recheck, problems, {
        claimed = function() return claimed end,
        reserve = reserve, start = start, read = read_popped, ungrouped = take_ungrouped, counts = counts}) or skipped
    else
      take_ungrouped(n)
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
  if (claimed > 0 or skipped) and redis.call('LLEN', K.wake) == 0
    and (grouped and redis.call('EXISTS', K.grotation) == 1 or not grouped and ready_any()) then
    redis.call('RPUSH', K.wake, '1')
  end
  next_due(limited_for)

  for _, v in ipairs(problems) do
    table.insert(out, v)
  end
  return out
end
