-- lib.lua: helpers prepended to every fenceq script when it is loaded, so the
-- scripts share one definition of time, indexes and the claim guard.
--
-- Every script receives the same KEYS, all under one queue's hash tag, so a
-- script touches exactly one Redis Cluster slot:
--   KEYS[1] ready      ZSET    pending jobs; score = priority band + FIFO sequence
--   KEYS[2] scheduled  ZSET    delayed jobs and retries in backoff; score = run_at
--   KEYS[3] leases     ZSET    running jobs; score = lease_until (the reaper reads this)
--   KEYS[4] dead       ZSET    dead jobs; score = finished_at
--   KEYS[5] done       ZSET    done jobs; score = finished_at
--   KEYS[6] cancelled  ZSET    cancelled jobs; score = finished_at
--   KEYS[7] wake       LIST    at most one wake-up token for workers blocked in BLPOP
--   KEYS[8] seq        STRING  the ready index's FIFO sequence
--   KEYS[9] paused     STRING  present while the queue is paused (nothing is claimed)
--   KEYS[10] limits    HASH    flow control shared by every pool: max_running, rate, period_ms
--   KEYS[11] starts    ZSET    recent starts, for the rate limit; score = claim time
--   KEYS[12] events    STREAM  lifecycle events, when enabled (limits field "events" = max length)
--   KEYS[13] blocked   ZSET    jobs waiting for the jobs they depend on; score = created_at
-- and, per job with dependents, SET "<base>children:<id>" of the jobs that wait for it.
-- ARGV[1] is the job key prefix "<prefix>:{<queue>}:job:"; a job's hash is
-- ARGV[1]..id. Job keys cannot be declared up front (claim and reap learn the
-- ids from an index), but they share the hash tag and so the slot.
--
-- All times are milliseconds of Redis server time (TIME). Worker clocks never
-- reach a script.

local K = {
  ready = KEYS[1], scheduled = KEYS[2], leases = KEYS[3], dead = KEYS[4],
  done = KEYS[5], cancelled = KEYS[6], wake = KEYS[7], seq = KEYS[8], paused = KEYS[9],
  limits = KEYS[10], starts = KEYS[11], events = KEYS[12], blocked = KEYS[13],
}
local JOB = ARGV[1]

-- The index that must hold a job in each state (invariant 6).
local INDEX = {
  pending = K.ready, scheduled = K.scheduled, running = K.leases,
  dead = K.dead, done = K.done, cancelled = K.cancelled, blocked = K.blocked,
}

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Scores are formatted by hand: the default number-to-string conversion of
-- Lua may print large integers in exponent form with too few digits.
local function int(n)
  return string.format('%.0f', n)
end

local function is_int(v)
  local n = tonumber(v)
  return n ~= nil and n == math.floor(n)
end

-- Priorities run from -100 to 100, higher first. Each gets a band of 2^45
-- sequence numbers, so the score stays an exact integer in a double.
local PRIORITY_BAND = 35184372088832

-- wake leaves a token for a worker blocked in BLPOP on the wake list. One
-- token is enough: the worker it wakes claims a batch, and a claim that
-- leaves work behind wakes the next worker.
-- setting reads one of the queue's settings (flow control and events, set
-- by broker.SetLimits and SetEvents), all read once per script call.
local settings
local function setting(name)
  if not settings then
    local v = redis.call('HMGET', K.limits, 'events', 'max_running', 'rate', 'period_ms')
    settings = {events = tonumber(v[1]) or 0, max_running = tonumber(v[2]), rate = tonumber(v[3]), period_ms = tonumber(v[4])}
  end
  return settings[name]
end

-- event appends a lifecycle event to the queue's capped stream when the
-- queue has events enabled.
local function event(what, id, gen, detail)
  local events_max = setting('events')
  if events_max > 0 then
    redis.call('XADD', K.events, 'MAXLEN', '~', events_max, '*',
      'event', what, 'id', id, 'gen', tostring(gen or ''), 'detail', detail or '')
  end
end

local function wake()
  if redis.call('LLEN', K.wake) == 0 then
    redis.call('RPUSH', K.wake, '1')
  end
end

-- to_ready files a job as pending at the tail of its priority and wakes a
-- blocked worker.
local function to_ready(id, key, priority)
  local seq = redis.call('INCR', K.seq)
  local p = tonumber(priority) or 0
  redis.call('ZADD', K.ready, int((100 - p) * PRIORITY_BAND + seq), id)
  redis.call('HSET', key, 'state', 'pending')
  wake()
end

-- release_blocked files a job whose dependencies are met: scheduled when
-- its run_at is still ahead, else pending.
local function release_blocked(id, key, now)
  redis.call('ZREM', K.blocked, id)
  local f = redis.call('HMGET', key, 'run_at', 'priority')
  local run_at = tonumber(f[1]) or now
  if run_at > now then
    redis.call('HSET', key, 'state', 'scheduled')
    redis.call('ZADD', K.scheduled, int(run_at), id)
    wake()
  else
    to_ready(id, key, f[2])
  end
  event('unblocked', id, 0)
end

-- finish moves a job into a final state. The caller has already taken it out
-- of its previous index. It settles the jobs that depend on it: each
-- dependency done (or ended, for a dependent that runs anyway) takes one
-- off its count, and a dependency that ends dead or cancelled cancels a
-- dependent that asked for that (finish recurses down the chain).
local finish
finish = function(id, key, state, now)
  -- One read for everything a finished job may owe others; the flags are
  -- set only on jobs that have a unique key, Wait callers or dependents.
  local f = redis.call('HMGET', key, 'gen', 'unique_until_done', 'waited', 'has_children')
  event(state, id, f[1])
  redis.call('HSET', key, 'state', state, 'finished_at', now, 'token', '')
  redis.call('HDEL', key, 'lease_until')
  redis.call('ZADD', INDEX[state], now, id)
  -- A unique key held until the job ends is free from now on.
  if f[2] and redis.call('GET', f[2]) == id then
    redis.call('DEL', f[2])
  end
  -- Under a concurrency limit a finished job frees a slot: wake a pool.
  if setting('max_running') then
    wake()
  end
  local base = string.sub(JOB, 1, -5) -- JOB without its 'job:'
  -- Wake the callers of Broker.Wait blocked on this job (wait.lua counts them).
  if f[3] then
    local waiting = tonumber(redis.call('GET', base .. 'waiting:' .. id) or '0') or 0
    if waiting > 0 then
      local finished = base .. 'finished:' .. id
      for _ = 1, waiting do
        redis.call('RPUSH', finished, state)
      end
      redis.call('PEXPIRE', finished, 60000)
    end
    redis.call('DEL', base .. 'waiting:' .. id)
  end
  if not f[4] then
    return
  end
  local children_key = base .. 'children:' .. id
  local children = redis.call('SMEMBERS', children_key)
  redis.call('DEL', children_key)
  for _, child in ipairs(children) do
    local ckey = JOB .. child
    local c = redis.call('HMGET', ckey, 'state', 'on_parent_failure')
    if c[1] == 'blocked' then
      if state == 'done' or c[2] == 'run' then
        if redis.call('HINCRBY', ckey, 'blocked_on', -1) <= 0 then
          release_blocked(child, ckey, now)
        end
      else
        redis.call('ZREM', K.blocked, child)
        redis.call('HSET', ckey, 'last_error', 'dependency ' .. id .. ' ended ' .. state)
        finish(child, ckey, 'cancelled', now)
      end
    end
  end
end

-- read fetches fields of a job hash, the first of which must be present. It
-- answers nil, nil when the job does not exist, and nil and a reason when the
-- key is not a hash or lacks that field, instead of aborting the script
-- half-way (Redis does not roll back a script's earlier writes on an error).
local function read(key, ...)
  local first = ...
  local f = redis.pcall('HMGET', key, ...)
  if f.err then
    return nil, 'job key holds a ' .. redis.call('TYPE', key).ok .. ', not a hash'
  end
  if not f[1] then
    if redis.call('EXISTS', key) == 0 then
      return nil, nil
    end
    return nil, 'job hash has no ' .. first .. ' field'
  end
  return f, nil
end

-- holds is the claim guard of every worker operation (invariants 1 and 2):
-- the claim (gen, token) is valid iff the job is running with exactly that
-- gen and token. Expiry is deliberately not part of it (invariant 4).
local function holds(f, gen, token)
  return f ~= nil and f[1] == 'running' and f[2] == gen and f[3] == token and token ~= ''
end

-- misfiled handles an id found in an index whose job hash does not belong
-- there. It never loses a job: a hash in another state is filed into that
-- state's index, a hash with unusable fields is marked dead with the reason,
-- and a key that is not a hash is listed in dead for an operator. Only an id
-- whose hash does not exist, which holds nothing to lose, simply disappears.
-- It appends (id, problem) to problems.
local function misfiled(id, key, index_name, problems, now)
  local f, bad = read(key, 'state', 'lease_until', 'run_at')
  local problem
  if bad then
    problem = bad
    if redis.call('TYPE', key).ok == 'hash' then
      redis.call('HSET', key, 'last_error', 'corrupt job hash: ' .. bad)
      finish(id, key, 'dead', now)
      problem = problem .. '; marked dead'
    else
      redis.call('ZADD', K.dead, now, id)
      problem = problem .. '; listed in dead for an operator'
    end
  elseif not f then
    problem = 'listed in ' .. index_name .. ' but the job hash does not exist'
  elseif INDEX[f[1]] then
    local score = now
    if f[1] == 'running' then
      score = tonumber(f[2]) or now
    elseif f[1] == 'scheduled' then
      score = tonumber(f[3]) or now
    end
    if f[1] == 'pending' then
      local pri = redis.call('HGET', key, 'priority')
      to_ready(id, key, pri)
    else
      redis.call('ZADD', INDEX[f[1]], int(score), id)
    end
    problem = 'listed in ' .. index_name .. ' but in state ' .. f[1] .. '; refiled'
  else
    problem = 'listed in ' .. index_name .. ' with unknown state "' .. tostring(f[1]) .. '"; marked dead'
    redis.call('HSET', key, 'last_error', 'corrupt job hash: ' .. problem)
    finish(id, key, 'dead', now)
  end
  table.insert(problems, id)
  table.insert(problems, problem)
end

-- corrupt marks a job dead because a field it needs holds garbage.
local function corrupt(id, key, reason, problems, now)
  redis.call('HSET', key, 'last_error', 'corrupt job hash: ' .. reason)
  finish(id, key, 'dead', now)
  table.insert(problems, id)
  table.insert(problems, reason .. '; marked dead')
end

-- bad_int names the first numeric field of f (from index first on,
-- with names) that is missing or not an integer, or answers nil.
local function bad_int(f, first, names)
  for i, name in ipairs(names) do
    local v = f[first + i - 1]
    if not is_int(v) then
      if not v then
        return 'field ' .. name .. ' is missing'
      end
      return 'field ' .. name .. ' is "' .. v .. '", not an integer'
    end
  end
  return nil
end

