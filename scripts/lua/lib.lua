-- lib.lua: helpers prepended to every fenceq script when it is loaded, so the
-- scripts share one definition of time, indexes, generations, the claim
-- guard and the bounded cascade of dependents.
--
-- Key names live in one place, broker/keys.go, which also writes the lines
-- loaded before this file: begin_keys(base), which starts a call for the
-- queue whose key prefix "<prefix>:{<queue>}:" is base (every script
-- receives it as ARGV[1]); K, the queue's keys by name, built from BASE
-- (all under one queue's hash tag, so a script touches exactly one Redis
-- Cluster slot; a script's one KEY is one of them, for the routing); JOB,
-- the prefix of its job hashes (a job's hash is JOB .. id);
-- derived(kind, id), the key of one job's (or request's) structure of a
-- kind keys.go lists; LEGACY_READY, the ready index of earlier versions
-- (one sorted set of every priority, drained by ready_migrate); and
-- INDEX[state], the key of the index that must hold a job in that state
-- (invariant 6), nil for an unknown state. A pending job is in one of
-- three (ready_index says which); INDEX names the list. Job keys and
-- derived keys cannot be declared up front (claim and reap learn the ids
-- from an index), but they share the hash tag and so the slot. keys.go
-- says what each key holds; this file declares no key name of its own.
--
-- Per-call state: broker/scripts.go loads this library once for all
-- operations (a FUNCTION library, whose upvalues live from one call to the
-- next) or as the prelude of each script (EVALSHA). Every call starts with
-- begin(ARGV), which resets all that a call changes: a variable at this
-- level that a call assigns must be declared below and reset in begin.
--
-- All times are milliseconds of Redis server time (TIME). Worker clocks never
-- reach a script.
--
-- Replies: an operation that can refuse or find nothing answers a STATUS
-- code first, then what that status carries: {status, payload...} for an
-- operation on one job, and one (status, payload...) per item, after what
-- the whole call reports, for a batch (ack, renew, retry). Scripts that
-- only read or repair (claim, reap, trim, leases, overview, throughput)
-- answer their data. A job key that is not a job hash is the status
-- 'corrupt' with the reason, never an error reply: Go reads numbers, never
-- error text.
--
-- Bounded scripts (invariant 8): no script loops over anything but the
-- batch its caller passed, plus at most a fixed budget of cascade steps.
-- Nothing here recurses.

-- settings caches the queue's settings for one call (setting); cascading
-- says that this call handed dependents to the cascade (finish);
-- ready0_empty, that this call found ready0 empty (ready_pop).
local settings, cascading, ready0_empty
local function begin(argv)
  begin_keys(argv[1])
  settings = nil
  cascading = false
  ready0_empty = false
end

-- STATUS is the first value of a reply. broker/status.go holds the same
-- list, and a test checks that the two agree.
local STATUS = {
  ok = 0,            -- the operation took effect, or answers what it read
  stale = 1,         -- the claim is no longer valid; nothing changed
  cancel = 2,        -- renew: extended, but the job's cancellation was requested
  missing = 3,       -- no such job
  corrupt = 4,       -- the job key holds no usable job; payload: why
  exists = 5,        -- enqueue: the id is taken; payload: the job's state
  unique_held = 6,   -- enqueue: the unique key is held; payload: holder id, its state
  no_dependency = 7, -- enqueue: a dependency does not exist; payload: its id
  refused = 8,       -- retry: the job cannot go back as enqueue would let it in; payload: why
  not_retryable = 9, -- retry: the job is neither dead nor cancelled
  waiting = 10,      -- wait: the job has not finished; the caller is registered
  wrong_state = 11,  -- delete, promote, release_unowned: the job's state is not one the operation takes; payload: that state
}

local FINAL = {done = true, dead = true, cancelled = true}

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Scores are formatted by hand: the default number-to-string conversion of
-- Lua may print large integers in exponent form with too few digits.
local function int(n)
  return string.format('%.0f', n)
end

-- BATCH_CHUNK bounds the members of one ZADD or ZREM that files a batch
-- (zadd_all, zrem_all): unpack passes at most a few thousand values.
local BATCH_CHUNK = 500

-- zadd_all files every id of ids in index at one score, in one ZADD per
-- BATCH_CHUNK ids: a batch's jobs enter an index in one call, not one each.
-- The script is atomic, so no reader sees them in neither index (invariant 6).
local function zadd_all(index, score, ids)
  for i = 1, #ids, BATCH_CHUNK do
    local args = {}
    for j = i, math.min(i + BATCH_CHUNK - 1, #ids) do
      table.insert(args, score)
      table.insert(args, ids[j])
    end
    redis.call('ZADD', index, unpack(args))
  end
end

-- zrem_all takes every id of ids out of index, as zadd_all files them.
local function zrem_all(index, ids)
  for i = 1, #ids, BATCH_CHUNK do
    redis.call('ZREM', index, unpack(ids, i, math.min(i + BATCH_CHUNK - 1, #ids)))
  end
end

-- call_chunked sends cmd on key with args, a list of items of width
-- values each (a ZADD's score and member: 2), in calls of at most
-- BATCH_CHUNK items.
local function call_chunked(cmd, key, args, width)
  local step = BATCH_CHUNK * width
  for i = 1, #args, step do
    redis.call(cmd, key, unpack(args, i, math.min(i + step - 1, #args)))
  end
end

-- MAX_INT is the largest integer a double (Lua's number) holds exactly;
-- a counter or generation above it is garbage, not a number to go on from.
local MAX_INT = 9007199254740991

local function is_int(v)
  local n = tonumber(v)
  return n ~= nil and n == math.floor(n) and math.abs(n) <= MAX_INT
end

-- Priorities run from -100 to 100, higher first. Each gets a band of 2^45
-- sequence numbers, so the score stays an exact integer in a double.
local PRIORITY_BAND = 35184372088832

-- next_gen draws a job's next generation from the queue's counter, so a
-- generation is never issued twice in a queue: it grows with every claim,
-- release and reap of a job (invariant 3) and across the deletion and
-- re-creation of an id (invariant 10). A job whose gen is above the counter
-- (written before the counter existed) lifts the counter past it.
local function next_gen(current)
  local g = redis.call('INCR', K.gen)
  local c = tonumber(current) or 0
  if c > MAX_INT then
    c = 0 -- a corrupt gen must not poison the queue's counter
  end
  if g <= c then
    g = c + 1
    redis.call('SET', K.gen, int(g))
  end
  return g
end

-- setting reads one of the queue's settings (flow control and events, set
-- by broker.SetLimits and SetEvents; the ready index's flags, kept by the
-- ready_ helpers below), all read once per script call, and the flags kept
-- with them (set_flag), as strings, false when absent.
local function setting(name)
  if not settings then
    local v = redis.call('HMGET', K.limits, 'events', 'max_running', 'rate', 'period_ms', 'tombs', 'hi', 'lo', 'legacy',
      'paused', 'sched_min', 'cascade', 'recheck_at', 'groups', 'g_pending', 'g_max_running', 'g_rate', 'g_period_ms',
      'g_ordered', 'g_overrides', 'gwait_min')
    settings = {events = tonumber(v[1]) or 0, max_running = tonumber(v[2]), rate = tonumber(v[3]), period_ms = tonumber(v[4]),
      tombs = math.max(0, tonumber(v[5]) or 0), hi = v[6], lo = v[7], legacy = v[8],
      paused = v[9], sched_min = v[10], cascade = v[11], recheck_at = v[12],
      groups = v[13], g_pending = math.max(0, tonumber(v[14]) or 0), g_max_running = tonumber(v[15]),
      g_rate = tonumber(v[16]), g_period_ms = tonumber(v[17]), g_ordered = v[18], g_overrides = v[19], gwait_min = v[20]}
  end
  return settings[name]
end

-- set_setting writes one of the ready index's flags (nil or 0 removes it),
-- and this call's copy, so that what the call does next reads it.
local function set_setting(name, value)
  setting(name)
  if value and value ~= 0 then
    redis.call('HSET', K.limits, name, value)
  else
    redis.call('HDEL', K.limits, name)
  end
  if name == 'tombs' then
    settings.tombs = value or 0
  else
    settings[name] = value and value ~= 0 and tostring(value) or nil
  end
end

-- The flags in the settings hash mirror what a claim would otherwise read
-- on every call, so a queue that uses none of those features costs a claim
-- no read of them (keys.go lists them):
--   paused      '1' or '0': whether the paused key exists (broker.Pause
--               and Resume write both in one transaction)
--   sched_min   a lower bound on the scores in scheduled, or 'none' when it
--               is empty. Every writer of scheduled lowers it
--               (sched_lower); a promotion rewrites it exactly. Low is
--               safe (a claim then looks, and rewrites it), high never is.
--   cascade     '1' while the cascade list may hold entries, '0' once a
--               step found it empty; finish() sets it with its RPUSH.
--   recheck_at  when a claim next reads all three structures anyway, and
--               rewrites the flags from them (RECHECK_MS later): a writer
--               that does not keep the flags (a fenceq version from before
--               them, during a rolling upgrade, or a hand edit) delays a
--               due job, a pause or the cascade by at most that.
-- An absent or unreadable flag means "look": a tree written before the
-- flags is read as before, and its first claim writes them.
local RECHECK_MS = 5000
-- set_flag writes one, when its value changes, and keeps this call's copy.
local function set_flag(name, value)
  if setting(name) ~= value then
    redis.call('HSET', K.limits, name, value)
    settings[name] = value
  end
end

-- sched_lower keeps sched_min a lower bound after a job is filed in
-- scheduled at score at: every writer of scheduled calls it. An absent or
-- unreadable bound stays so (a claim looks).
local function sched_lower(at)
  local sm = setting('sched_min')
  if sm == 'none' or is_int(sm) and tonumber(sm) > at then
    set_flag('sched_min', int(at))
  end
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

-- wake leaves a token for a worker blocked in BLPOP on the wake list. One
-- token is enough: the worker it wakes claims a batch, and a claim that
-- leaves work behind wakes the next worker.
local function wake()
  if redis.call('LLEN', K.wake) == 0 then
    redis.call('RPUSH', K.wake, '1')
  end
end

-- The ready index, in three parts: jobs of priority 0 (nearly all) in the
-- list ready0, pushed at its head and claimed from its tail, at O(1) each;
-- the others in the sorted sets ready_hi (above 0) and ready_lo (below 0),
-- by priority band and FIFO sequence. A claim takes from ready_hi, then
-- ready0, then ready_lo, and touches a set only while its flag in the
-- settings ('hi', 'lo') says it may hold jobs: ready_push sets the flag,
-- the claim that finds the set empty clears it.
-- A pending job of ready0 that leaves other than by a claim (a cancel)
-- leaves its entry, a tombstone: an LREM would cost O(n). The setting
-- 'tombs' counts them, so that ready_count stays exact; the claim skips an
-- entry whose job is not pending at priority 0 (a tombstone, or the older
-- entry of an id filed again since), and counts it off.

-- ready_index is the key that holds a pending job of that priority, and
-- the name of its flag ('' for ready0, which has none).
local function ready_index(priority)
  local p = tonumber(priority) or 0
  if p > 0 then
    return K.ready_hi, 'hi'
  elseif p < 0 then
    return K.ready_lo, 'lo'
  end
  return K.ready0, ''
end

-- ready_push files a job at the tail of its priority. It answers whether
-- the job may have found no pending job ahead of it, and so the workers
-- asleep: ready0 held only tombstones before it, or the job went to a set.
local function ready_push(id, priority)
  local index, flag = ready_index(priority)
  if flag == '' then
    return redis.call('LPUSH', K.ready0, id) - 1 <= setting('tombs')
  end
  local seq = redis.call('INCR', K.seq)
  redis.call('ZADD', index, int((100 - tonumber(priority)) * PRIORITY_BAND + seq), id)
  if not setting(flag) then
    set_setting(flag, 1)
  end
  return true
end

-- ready_remove takes a pending job out of the ready index: from its
-- sorted set, or, in ready0, by leaving a tombstone.
local function ready_remove(id, priority)
  if redis.call('ZREM', LEGACY_READY, id) == 1 then
    return -- not yet moved from an earlier version's index
  end
  local index, flag = ready_index(priority)
  if flag ~= '' then
    redis.call('ZREM', index, id)
  else
    set_setting('tombs', setting('tombs') + 1)
  end
end

-- ready_sources are the parts of the ready index a claim takes from, in
-- order: the sorted sets only while their flags are set.
local function ready_sources()
  local s = {}
  if setting('hi') then
    table.insert(s, 'hi')
  end
  table.insert(s, 'list')
  if setting('lo') then
    table.insert(s, 'lo')
  end
  return s
end

-- TOMB_SKIP bounds the tombstones one claim pops beyond the n it asks for,
-- so that n live jobs are found behind up to that many (invariant 8).
local TOMB_SKIP = 1000

-- ready_pop pops the ids of up to n entries of one part of the ready index
-- (ready_sources), in claim order. From ready0 it pops as many more as
-- there are tombstones (up to TOMB_SKIP): among them are n live ones, or
-- the list ends; ready_unpop puts back those the claim did not use. A set
-- found empty loses its flag.
local function ready_pop(source, n)
  if source == 'list' then
    local k = n + math.min(setting('tombs'), TOMB_SKIP)
    local ids = redis.call('RPOP', K.ready0, k) or {}
    ready0_empty = #ids < k
    return ids
  end
  local popped = redis.call('ZPOPMIN', source == 'hi' and K.ready_hi or K.ready_lo, n)
  local ids = {}
  for i = 1, #popped, 2 do
    table.insert(ids, popped[i])
  end
  if #ids < n then
    set_setting(source, nil)
  end
  return ids
end

-- ready_unpop puts ids[from..] popped from ready0 back at its tail, in
-- their order; ready_popped then counts off the tombstones the claim
-- skipped: dead, or all of them when it found the list empty and put
-- nothing back.
local function ready_unpop(ids, from)
  if from <= #ids then
    local back = {}
    for i = #ids, from, -1 do
      table.insert(back, ids[i])
    end
    redis.call('RPUSH', K.ready0, unpack(back))
    ready0_empty = false
  end
end
local function ready_popped(dead)
  local tombs = setting('tombs')
  if ready0_empty and tombs > 0 then
    set_setting('tombs', nil) -- no entry is left: none is a tombstone
  elseif dead > 0 and tombs > 0 then
    set_setting('tombs', math.max(0, tombs - dead))
  end
end

-- ready_live says whether a job read as (state, priority, group) is the
-- live entry of ready0 that a claim popped, and not a tombstone or the
-- older entry of an id filed again since. A pending job of a group waits
-- in its group's set: its id's entry in ready0 is then an earlier job's
-- (one cancelled there, whose id retention freed), unless the job was
-- filed in ready0 before the queue had groups, and is in no group's set.
-- id: the job's, to look in its group's set (nil: the caller knows it has
-- no group).
local function ready_live(state, priority, group, id)
  local _, flag = ready_index(priority)
  if state ~= 'pending' or flag ~= '' then
    return false
  end
  return not (group and group ~= '' and id and redis.call('ZSCORE', derived('gready', group), id))
end

-- ready_any says whether a claim may find pending jobs: O(1), and perhaps
-- true of a set flagged but emptied since.
local function ready_any()
  if setting('hi') or setting('lo') or setting('legacy') then
    return true
  end
  return not ready0_empty and redis.call('LLEN', K.ready0) > setting('tombs')
end

-- ready_count is the number of pending jobs, exactly, for the readers
-- (overview): four lengths and the tombstones, and the groups' count.
local function ready_count()
  return math.max(0, redis.call('LLEN', K.ready0) - setting('tombs')) + redis.call('ZCARD', K.ready_hi)
    + redis.call('ZCARD', K.ready_lo) + redis.call('ZCARD', LEGACY_READY) + setting('g_pending')
end

-- Groups (Job.Group). A pending job of a group waits in the group's own
-- sorted set, gready:<group> (priority, then FIFO, scored as ready_hi), in
-- place of the ready index. A claim takes turns over the groups in
-- grotation (scored by tickets from seq: lowest next), the ungrouped jobs
-- taking theirs as the member ''; a group that may not start a job now
-- waits in gwait, the timer, scored by when to look again. grunning counts
-- each group's valid leases (invariant 11): take raises it, and every
-- branch that ends a lease lowers it (lease_end), in the script that ends
-- the lease, so a slot is exactly as correct as the lease that holds it.
-- Being in grotation or gwait is a hint a claim re-checks, so a spare
-- entry costs one skipped step; but a group with a pending job is always
-- in one of them (G2), or it would never run again.
-- All of it is off the paths of a queue without groups: the settings'
-- flag 'groups' says when a claim takes turns, and every other step here
-- is taken only for a job that has a group.

-- GROUP_PARK_MS is when a group found full as a job joins it is looked
-- at again, should no slot of it free before (a safety net: a freed slot
-- brings it back at once, lease_end).
local GROUP_PARK_MS = 30000

-- group_limits answers a group's effective limits from the queue's
-- defaults and its override ov (glimits' field "<max> <rate> <period_ms>
-- <ordered>", each '-' for the default; false for none): max running (nil
-- for none), rate and period_ms (nil for none), ordered. An ordered group
-- runs one job at a time.
local function group_limits(ov)
  local max, rate, per = setting('g_max_running'), setting('g_rate'), setting('g_period_ms')
  local ordered = setting('g_ordered') == '1'
  local m, r, p, o = string.match(ov or '', '^(%S+) (%S+) (%S+) (%S+)$')
  if m then
    if m ~= '-' then
      max = tonumber(m)
    end
    if r ~= '-' then
      rate, per = tonumber(r), tonumber(p)
    end
    if o ~= '-' then
      ordered = o == '1'
    end
  end
  if not max or max <= 0 then
    max = nil
  end
  if not (rate and per and rate > 0 and per > 0) then
    rate, per = nil, nil
  end
  if ordered then
    max = 1
  end
  return max, rate, per, ordered
end

-- group_override reads a group's override, when the queue has any.
local function group_override(g)
  if setting('g_overrides') == '1' then
    return redis.call('HGET', K.glimits, g)
  end
  return false
end

-- group_spacing is how far apart a rate lets a group's starts be: rate
-- starts per period at most, as starts at least ceil(period / rate) apart.
local function group_spacing(rate, per)
  return math.max(1, math.ceil(per / rate))
end

-- gwait_lower keeps gwait_min a lower bound after a group is filed in gwait
-- at score at, as sched_lower does for scheduled.
local function gwait_lower(at)
  local gm = setting('gwait_min')
  if gm == 'none' or is_int(gm) and tonumber(gm) > at then
    set_flag('gwait_min', int(at))
  end
end

-- rotate_in files group g ('' for the ungrouped jobs) at the back of the
-- rotation, unless it is in it already, with ticket, or one drawn now.
local function rotate_in(g, ticket)
  redis.call('ZADD', K.grotation, 'NX', ticket or redis.call('INCR', K.seq), g)
end

-- rotate_back files the groups of gs that were parked in gwait back in the
-- rotation, and wakes a pool: a slot of each freed, or its limits changed.
-- Only while gwait may hold groups.
local function rotate_back(gs)
  if setting('gwait_min') == 'none' or #gs == 0 then
    return
  end
  local back = {}
  for i = 1, #gs, BATCH_CHUNK do
    local chunk = {unpack(gs, i, math.min(i + BATCH_CHUNK - 1, #gs))}
    local scores = redis.call('ZMSCORE', K.gwait, unpack(chunk))
    for j, g in ipairs(chunk) do
      if scores[j] then
        table.insert(back, g)
      end
    end
  end
  if #back == 0 then
    return
  end
  zrem_all(K.gwait, back)
  local t = redis.call('INCRBY', K.seq, #back) - #back
  for i = 1, #back, BATCH_CHUNK do
    local args = {}
    for j = i, math.min(i + BATCH_CHUNK - 1, #back) do
      table.insert(args, t + j)
      table.insert(args, back[j])
    end
    redis.call('ZADD', K.grotation, 'NX', unpack(args))
  end
  wake()
end

-- groups_on sets the flag 'groups' as a grouped job joins the queue; the
-- ungrouped jobs ready then take their turns from now on.
local function groups_on()
  if setting('groups') ~= '1' then
    set_flag('groups', '1')
    if ready_any() then
      rotate_in('')
    end
  end
end

-- group_place files group g, which has just got its first pending job, in
-- the rotation, or in gwait when it may not start one now: full (at
-- GROUP_PARK_MS), or cooling down for its rate (at when the rate lets it).
-- ticket: the job's own seq, unique, for its turn.
local function group_place(g, now, ticket)
  local max, rate, per = group_limits(group_override(g))
  local at
  if max and (tonumber(redis.call('HGET', K.grunning, g)) or 0) >= max then
    at = now + GROUP_PARK_MS
  elseif rate then
    local last = tonumber(redis.call('GET', derived('grate', g)))
    if last and last + group_spacing(rate, per) > now then
      at = last + group_spacing(rate, per)
    end
  end
  if at then
    redis.call('ZADD', K.gwait, int(at), g)
    gwait_lower(at)
  else
    rotate_in(g, ticket)
  end
  wake() -- a blocked worker claims it, or learns when to look (next_due)
end

-- group_push files a pending job of group g in gready:<g>, counts it in
-- g_pending, and places the group when the job is its first.
local function group_push(id, g, priority, now)
  groups_on()
  local seq = redis.call('INCR', K.seq)
  local ready = derived('gready', g)
  redis.call('ZADD', ready, int((100 - (tonumber(priority) or 0)) * PRIORITY_BAND + seq), id)
  redis.call('HINCRBY', K.limits, 'g_pending', 1)
  settings.g_pending = settings.g_pending + 1
  if redis.call('ZCARD', ready) == 1 then
    group_place(g, now or now_ms(), seq)
  end
end

-- group_pulled takes a pending job of group g out of gready:<g> (a cancel,
-- or a claim of an ordered group's held job), and the group out of the
-- rotation and the timer when that empties it. It answers whether the job
-- was there.
local function group_pulled(id, g)
  local ready = derived('gready', g)
  if redis.call('ZREM', ready, id) == 0 then
    return false
  end
  local left = setting('g_pending') - 1 -- loads settings, which the next line writes
  redis.call('HINCRBY', K.limits, 'g_pending', -1)
  settings.g_pending = math.max(0, left)
  if redis.call('EXISTS', ready) == 0 then
    redis.call('ZREM', K.grotation, g)
    redis.call('ZREM', K.gwait, g)
  end
  return true
end

-- group_free frees the slots of leases that ended in this call: frees maps
-- a group to how many (invariant 11; a count that would go below 0, a
-- lease taken before the queue counted groups, ends at 0). Groups parked
-- full go back in the rotation, in this same script, so no crash can fall
-- between a freed slot and the group's next turn.
local function group_free(frees)
  local gs = {}
  for g in pairs(frees) do
    table.insert(gs, g)
  end
  if #gs == 0 then
    return
  end
  table.sort(gs) -- the same writes in the same order on every server
  for i = 1, #gs, BATCH_CHUNK do
    local chunk = {unpack(gs, i, math.min(i + BATCH_CHUNK - 1, #gs))}
    local cur = redis.call('HMGET', K.grunning, unpack(chunk))
    local set, del = {}, {}
    for j, g in ipairs(chunk) do
      local left = (tonumber(cur[j]) or 0) - frees[g]
      if left > 0 then
        table.insert(set, g)
        table.insert(set, int(left))
      else
        table.insert(del, g)
      end
    end
    if #set > 0 then
      redis.call('HSET', K.grunning, unpack(set))
    end
    if #del > 0 then
      redis.call('HDEL', K.grunning, unpack(del))
    end
  end
  rotate_back(gs)
end

-- lease_end ends the lease of a job of group g ('' or nil: none) in the
-- leases index and its group's count: every branch that ends a lease calls
-- it, once, after it has read state=running from the hash. back: the job
-- goes back to wait in its group (pending or scheduled), which an ordered
-- group then holds for (ghold: the claim takes that job next).
local function lease_end(id, g, back)
  redis.call('ZREM', K.leases, id)
  if not g or g == '' then
    return
  end
  group_free({[g] = 1})
  if back then
    local _, _, _, ordered = group_limits(group_override(g))
    if ordered then
      redis.call('HSET', K.ghold, g, id)
    end
  end
end

-- group_unhold lets an ordered group go on without job id, when it holds
-- for it: the job is cancelled. The group goes back in the rotation if it
-- waited in gwait for the job's retry.
local function group_unhold(id, g)
  if redis.call('HGET', K.ghold, g) == id then
    redis.call('HDEL', K.ghold, g)
    rotate_back({g})
  end
end

-- to_ready files a job as pending at the tail of its priority and wakes a
-- blocked worker when it found no pending job ahead of it: behind others,
-- the pushes that filed them woke the workers (and a claim that leaves work
-- behind wakes the next), so a busy queue's enqueue reads no wake list.
-- state_written: the caller wrote state=pending already (enqueue does,
-- with the job's other fields).
-- group: the job's group ('' or nil: none), whose own set it joins
-- (group_push); now: the caller's Redis time, or nil.
local function to_ready(id, key, priority, state_written, group, now)
  if not state_written then
    redis.call('HSET', key, F.state, 'pending')
  end
  if group and group ~= '' then
    group_push(id, group, priority, now)
    return
  end
  if ready_push(id, priority) then
    if setting('groups') == '1' then
      rotate_in('') -- the ungrouped jobs take their turn again
    end
    wake()
  end
end

-- requeue files a job whose lease has ended as pending again. refund gives
-- its attempt back: the worker did not fail (it released the job, or an
-- operator did). A wait for a handler (fail.lua's unhandled_since) starts
-- again: the claim ended other than by a give-back, most likely in a pool
-- that has the kind.
local function requeue(id, key, priority, refund, group, now)
  if refund then
    redis.call('HINCRBY', key, F.attempt, -1)
  end
  redis.call('HDEL', key, F.lease_until, F.unhandled_since)
  to_ready(id, key, priority, false, group, now)
end

-- release_blocked files a job whose dependencies are met: scheduled when
-- its run_at is still ahead, else pending.
local function release_blocked(id, key, now)
  redis.call('ZREM', K.blocked, id)
  local f = redis.call('HMGET', key, F.run_at, F.priority, F.group)
  local run_at = tonumber(f[1]) or now
  if run_at > now then
    redis.call('HSET', key, F.state, 'scheduled')
    redis.call('ZADD', K.scheduled, int(run_at), id)
    sched_lower(run_at)
    wake()
  else
    to_ready(id, key, f[2], false, f[3], now)
  end
  event('unblocked', id, 0)
end

-- RESEND_HORIZON_MS is the re-send horizon (broker.ResendHorizon): no
-- copy of a request reaches Redis later than this after its first send
-- (the broker starts no re-send later). So retention (trim.lua) deletes no
-- job that finished within it, and a re-send of the request that finished
-- it, or of the enqueue that stored it, still finds it; and a claim that
-- took nothing keeps its empty record no longer (take.lua).
local RESEND_HORIZON_MS = 5000

-- WAIT_KEEP_MS is how long a finished job's Broker.Wait callers have to
-- read it: their wake-up lasts that long, and retention does not delete the
-- job before then (trim.lua keeps it as a final record), however short it is.
local WAIT_KEEP_MS = 60000

-- final_key is the key of final record n of id, n from 1 to
-- WAIT_KEEP_RECORDS: one per trimmed end of the id (each job enqueued
-- under it), so that a later job's trim never overwrites the record an
-- earlier job's callers still read. At most that many per id at a time.
local WAIT_KEEP_RECORDS = 4
local function final_key(n, id)
  return derived('final', n .. ':' .. id)
end

-- wake_waiters leaves one wake-up for the Broker.Wait callers of job id.
-- A key of another type there (a hand edit) costs the callers their
-- wake-up, never the script its remaining writes: they look again within
-- 30 s anyway.
local function wake_waiters(id, state)
  local finished = derived('finished', id)
  local n = redis.pcall('RPUSH', finished, state)
  if type(n) == 'number' then
    redis.call('LTRIM', finished, -1, -1)
    redis.call('PEXPIRE', finished, WAIT_KEEP_MS)
  end
end

-- detach_children hands the dependents of job id, which ended as state,
-- to the cascade as one entry (cascade_step settles them in bounded
-- steps): a done job's count one dependency off, the others' are
-- cancelled unless they run anyway. The set is detached under a name of
-- its own, so a job that later reuses the id starts with no dependents.
-- finish calls it, and delete.lua for a job deleted before it finished.
local function detach_children(id, state)
  local children = derived('children', id)
  if redis.call('EXISTS', children) == 1 then
    local n = int(redis.call('INCR', K.gen))
    redis.call('RENAME', children, derived('cascade', n))
    redis.call('RPUSH', K.cascade, n .. ':' .. state .. ':' .. id)
    set_flag('cascade', '1')
    cascading = true
  end
end

-- finish moves a job into a final state. The caller has already taken it out
-- of its previous index. What the job owes others is O(1) here: its unique
-- key is freed, one wake-up is left for Broker.Wait callers, and its
-- dependents are handed to the cascade as one entry, to be settled in
-- bounded steps (cascade_step). The claim token stays, with the outcome in
-- 'settled' when a settlement wrote it, so a re-sent settlement can be told
-- from a stale one (resettled).
-- set: more (field, value) pairs to write with the state, or nil. owed:
-- the job's OWED fields when the caller read them already (ack does, with
-- its guard's), else nil. filed: nil to file the job in its state's index
-- now, or a list the caller files in one call with the batch's other jobs
-- (zadd_all, at now) before anything reads that index.
-- lease_until stays: a finished job's is the end of its last lease, which
-- readers show only for a running job (inspect.go's parseJob), so deleting
-- it would cost every settlement a call for nothing.
local OWED = {F.gen, F.unique_until_done, F.waited, F.has_children, F.wait_until}
local function finish(id, key, state, now, set, owed, filed)
  -- One read for everything a finished job may owe others; the flags are
  -- set only on jobs that have a unique key, Wait callers or dependents.
  local f = owed or redis.call('HMGET', key, unpack(OWED))
  event(state, id, f[1])
  local fields = {F.state, state, F.finished_at, now}
  for _, v in ipairs(set or {}) do
    table.insert(fields, v)
  end
  if f[3] then
    -- Its callers of Broker.Wait read it within this, trimmed or not.
    table.insert(fields, F.wait_until)
    table.insert(fields, int(now + WAIT_KEEP_MS))
  end
  redis.call('HSET', key, unpack(fields))
  -- Without callers now, an earlier end's wait_until (the job was retried
  -- since) keeps nothing for Wait: nobody waits. That holds for a job with
  -- dependents too, or trim would keep a final record for nobody.
  -- Deleted only when present: a plain job has none of these fields.
  local done_with = {}
  if f[3] then
    table.insert(done_with, F.waited)
  elseif f[5] then
    table.insert(done_with, F.wait_until)
  end
  if f[4] then
    table.insert(done_with, F.has_children)
  end
  if #done_with > 0 then
    redis.call('HDEL', key, unpack(done_with))
  end
  if filed then
    table.insert(filed, id)
  else
    redis.call('ZADD', INDEX[state], now, id)
  end
  -- A unique key held until the job ends is free from now on.
  if f[2] and redis.call('GET', f[2]) == id then
    redis.call('DEL', f[2])
  end
  -- Under a concurrency limit a finished job frees a slot: wake a pool.
  if setting('max_running') then
    wake()
  end
  -- One wake-up for the callers of Broker.Wait; each caller it wakes
  -- passes it on (wait.lua), so this costs the same for any number.
  if f[3] then
    wake_waiters(id, state)
  end
  if f[4] then
    detach_children(id, state)
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

-- read_job reads fields of the job an operator or caller named, as read
-- does, and answers the reply for a job that cannot be read: nil and
-- {missing} when there is none, nil and {corrupt, why} when its key holds
-- no usable job hash.
local function read_job(key, ...)
  local f, bad = read(key, ...)
  if bad then
    return nil, {STATUS.corrupt, bad}
  end
  if not f then
    return nil, {STATUS.missing}
  end
  return f, nil
end

-- holds is the claim guard of every worker operation (invariants 1 and 2):
-- the claim (gen, token) is valid iff the job is running with exactly that
-- gen and token. Expiry is deliberately not part of it (invariant 4).
-- f holds the fields state, gen, token, settled, in that order.
local function holds(f, gen, token)
  return f ~= nil and f[1] == 'running' and f[2] == gen and f[3] == token and token ~= ''
end

-- PREV_SETTLED are the fields that keep the settlement records of a job's
-- earlier claims, newest first, each "<token> <op> <outcome>": a re-sent
-- settlement finds its record after as many later claims as there are
-- fields. One is not enough: a settlement whose reply is lost may meet
-- another worker's claim and release, and then its own sender's next claim
-- (a fail or snooze that claims after it, or its re-ask) before its re-send
-- comes. Each is a field of its own, short enough for the hash's listpack.
local PREV_SETTLED = {F.prev_settled, F.prev_settled_2, F.prev_settled_3}

-- set_aside adds to fields (an HSET's list of fields and values) what
-- moves a job's last settlement record aside as a claim, or an operator's
-- retry, replaces it: record ("<token> <op> <outcome>") into the first of
-- PREV_SETTLED and each kept one a field on, the oldest dropping out.
-- ... are the current values of all but the last of PREV_SETTLED, as the
-- caller read them with its other fields (false when unset).
local function set_aside(fields, record, ...)
  table.insert(fields, PREV_SETTLED[1])
  table.insert(fields, record)
  for i = 1, #PREV_SETTLED - 1 do
    local kept = select(i, ...)
    if kept then
      table.insert(fields, PREV_SETTLED[i + 1])
      table.insert(fields, kept)
    end
  end
end

-- resettled answers the outcome that this claim's own settlement by op
-- recorded, when the request is a re-send whose first reply was lost
-- (invariant 9), not a stale claim: the job still carries the claim's token
-- and no longer runs under it, or a later claim kept the record
-- (PREV_SETTLED), since a job settled back to pending may be claimed again
-- before the re-send comes. Tokens are unique, so no other claim can match;
-- another operation under the same claim (a fail after an ack) stays
-- stale. The record is "<op> <outcome>" in the field 'settled', which
-- claim, reap and release_unowned clear. key is the job's; f holds state,
-- gen, token, settled.
local function resettled(key, f, token, op)
  if f == nil or token == '' then
    return nil
  end
  local record
  if f[1] ~= 'running' and f[3] == token then
    record = f[4]
  else
    for _, prev in ipairs(redis.call('HMGET', key, unpack(PREV_SETTLED))) do
      if prev and string.sub(prev, 1, #token + 1) == token .. ' ' then
        record = string.sub(prev, #token + 2)
        break
      end
    end
  end
  local done_op, outcome = string.match(record or '', '^(%S+) (%S+)$')
  if done_op == op then
    return outcome
  end
  return nil
end

-- settled records the outcome of a settlement by op, for resettled.
local function settled(key, op, outcome)
  redis.call('HSET', key, F.settled, op .. ' ' .. outcome)
end

-- dependencies reads the jobs a job depends on (duplicates count once): the
-- ones still open, and why the job cannot wait for them: a dependency ended
-- dead or cancelled under the 'cancel' policy (failed), or one that does not
-- exist (missing).
local function dependencies(deps, policy)
  local seen, open, failed = {}, {}, nil
  for _, p in ipairs(deps) do
    if not seen[p] then
      seen[p] = true
      local f = read(JOB .. p, F.state)
      if not f then
        return nil, nil, p
      end
      if f[1] == 'dead' or f[1] == 'cancelled' then
        if policy ~= 'run' then
          failed = failed or (p .. ' ended ' .. f[1])
        end
      elseif f[1] ~= 'done' then
        table.insert(open, p)
      end
    end
  end
  return open, failed, nil
end

-- unique_holder answers the job holding a unique key and its state ('' for
-- a holder trimmed since), or nil when the key is free. The holder's own
-- terms decide: a key with a TTL is held until it expires, a key without
-- one while its job is unfinished (finish() deletes it; this is the safety
-- net should it not have).
local function unique_holder(ukey)
  local holder = redis.call('GET', ukey)
  if not holder then
    return nil
  end
  local f = read(JOB .. holder, F.state)
  local state = f and f[1] or ''
  if redis.call('PTTL', ukey) > 0 or (f and not FINAL[state]) then
    return holder, state
  end
  return nil
end

-- block files a job as blocked on its open dependencies. Each dependency
-- lists it as "<incarnation>:<id>"; a fresh incarnation per blocking means
-- an entry left behind by a cancelled, retried or re-created job with the
-- same id is recognised as not its own and ignored (cascade_step).
local function block(id, key, open, now)
  local inc = int(redis.call('INCR', K.gen))
  for _, p in ipairs(open) do
    redis.call('SADD', derived('children', p), inc .. ':' .. id)
    redis.call('HSET', JOB .. p, F.has_children, '1') -- finish() looks for dependents only then
  end
  redis.call('HSET', key, F.state, 'blocked', F.blocked_on, #open, F.inc, inc)
  redis.call('ZADD', K.blocked, now, id)
end

-- cascade_step settles at most budget dependents of finished jobs, oldest
-- finish first: each waiting dependent of a done job (or of any finished
-- job, for a dependent that runs anyway) counts one dependency off and is
-- released at zero; a dependent of a dead, cancelled or deleted job
-- (delete.lua) is cancelled, and its own dependents join the cascade
-- behind. What is left waits for
-- the next step (claim and reap take one; a step that leaves work wakes a
-- pool). It answers whether work is left.
local function cascade_step(budget, now)
  local spent = 0
  while spent < budget do
    local head = redis.call('LINDEX', K.cascade, 0)
    if not head then
      set_flag('cascade', '0')
      return false
    end
    local n, pstate, parent = string.match(head, '^(%d+):(%a+):(.*)$')
    local members = {}
    if n then
      members = redis.pcall('SPOP', derived('cascade', n), budget - spent)
    end
    if not n or members.err then
      -- Not an entry this library wrote, or its set is not a set: drop it
      -- rather than stop the queue. Check reports a dependent left waiting.
      members = {}
      redis.call('LPOP', K.cascade)
    elseif redis.call('EXISTS', derived('cascade', n)) == 0 then
      redis.call('LPOP', K.cascade) -- that job's dependents are all taken
    end
    if #members == 0 then
      spent = spent + 1 -- an entry with nothing left still costs a step
    end
    for _, m in ipairs(members) do
      spent = spent + 1
      local inc, child = string.match(m, '^(%d+):(.*)$')
      local ckey = JOB .. (child or '')
      local c = child and read(ckey, F.state, F.inc, F.on_parent_failure, F.blocked_on)
      if c and c[1] == 'blocked' and c[2] == inc and not is_int(c[4]) then
        redis.call('ZREM', K.blocked, child)
        redis.call('HSET', ckey, F.last_error, 'corrupt job hash: field blocked_on is "' .. tostring(c[4]) .. '", not an integer')
        finish(child, ckey, 'dead', now)
      elseif c and c[1] == 'blocked' and c[2] == inc then
        if pstate == 'done' or c[3] == 'run' then
          if redis.call('HINCRBY', ckey, F.blocked_on, -1) <= 0 then
            release_blocked(child, ckey, now)
          end
        else
          redis.call('ZREM', K.blocked, child)
          local why = pstate == 'deleted' and ' was deleted' or ' ended ' .. pstate
          redis.call('HSET', ckey, F.last_error, 'dependency ' .. parent .. why)
          finish(child, ckey, 'cancelled', now)
        end
      end
    end
  end
  local left = redis.call('EXISTS', K.cascade) == 1
  set_flag('cascade', left and '1' or '0')
  return left
end

-- CASCADE_INLINE is how many dependents a script that finished a job
-- settles before it answers: a small fan-out is released at once, a large
-- one goes on in later steps.
local CASCADE_INLINE = 50

-- settle_cascade runs the inline cascade step when this script call
-- finished a job with dependents, and wakes a pool to go on when work is
-- left.
local function settle_cascade(now)
  if cascading and cascade_step(CASCADE_INLINE, now) then
    wake()
  end
end

-- misfiled handles an id found in an index whose job hash does not belong
-- there. It never loses a job: a hash in another state is filed into that
-- state's index, a hash with unusable fields is marked dead with the reason,
-- and a key that is not a hash is listed in dead for an operator. Only an id
-- whose hash does not exist, which holds nothing to lose, simply disappears.
-- It appends (id, problem) to problems.
local function misfiled(id, key, index_name, problems, now)
  local f, bad = read(key, F.state, F.lease_until, F.run_at)
  local problem
  if bad then
    problem = bad
    if redis.call('TYPE', key).ok == 'hash' then
      redis.call('HSET', key, F.last_error, 'corrupt job hash: ' .. bad)
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
      local p = redis.call('HMGET', key, F.priority, F.group)
      to_ready(id, key, p[1], false, p[2], now)
    else
      redis.call('ZADD', INDEX[f[1]], int(score), id)
      if f[1] == 'scheduled' then
        sched_lower(score)
      end
    end
    problem = 'listed in ' .. index_name .. ' but in state ' .. f[1] .. '; refiled'
  else
    problem = 'listed in ' .. index_name .. ' with unknown state "' .. tostring(f[1]) .. '"; marked dead'
    redis.call('HSET', key, F.last_error, 'corrupt job hash: ' .. problem)
    finish(id, key, 'dead', now)
  end
  table.insert(problems, id)
  table.insert(problems, problem)
end

-- LEGACY_STEP bounds the entries of an earlier version's ready index that
-- one claim moves (invariant 8).
local LEGACY_STEP = 500

-- ready_migrate moves a step of an earlier version's ready index
-- (LEGACY_READY) into today's, while the setting 'legacy' says it may hold
-- jobs (the reaper sets it when the key exists; the step that empties it
-- clears it). It moves the newest first, so that each entry of priority 0
-- goes to the tail of ready0: ahead of the jobs filed since, behind the
-- older ones moved before. The sets keep the entries' scores, which count
-- on the same sequence. An entry of priority 0 whose job is not pending
-- there goes to misfiled.
local function ready_migrate(problems, now)
  if not setting('legacy') then
    return
  end
  local popped = redis.call('ZPOPMAX', LEGACY_READY, LEGACY_STEP)
  local sets, list = {hi = {}, lo = {}}, {}
  for i = 1, #popped, 2 do
    local id, score = popped[i], tonumber(popped[i + 1]) or 0
    if score < 100 * PRIORITY_BAND then
      table.insert(sets.hi, popped[i + 1])
      table.insert(sets.hi, id)
    elseif score >= 101 * PRIORITY_BAND then
      table.insert(sets.lo, popped[i + 1])
      table.insert(sets.lo, id)
    else
      local f = read(JOB .. id, F.state, F.priority)
      if f and ready_live(f[1], f[2]) then
        table.insert(list, id)
      else
        misfiled(id, JOB .. id, 'ready', problems, now)
      end
    end
  end
  for flag, members in pairs(sets) do
    if #members > 0 then
      redis.call('ZADD', flag == 'hi' and K.ready_hi or K.ready_lo, unpack(members))
      if not setting(flag) then
        set_setting(flag, 1)
      end
    end
  end
  if #list > 0 then
    redis.call('RPUSH', K.ready0, unpack(list))
    ready0_empty = false
  end
  if #popped / 2 < LEGACY_STEP then
    set_setting('legacy', nil)
  end
end

-- corrupt marks a job dead because a field it needs holds garbage.
local function corrupt(id, key, reason, problems, now)
  redis.call('HSET', key, F.last_error, 'corrupt job hash: ' .. reason)
  finish(id, key, 'dead', now)
  table.insert(problems, id)
  table.insert(problems, reason .. '; marked dead')
end

-- raw_in_string reports whether JSON text s has a raw control character
-- inside a string, which Redis's cjson takes and Go's decoder (and JSON)
-- refuses. Between tokens, JSON allows tab, newline and carriage return,
-- so only strings are scanned, and only in a text that has a control
-- character at all (Go writes none).
local function raw_in_string(s)
  if not string.find(s, '[%z\1-\31]') then
    return false
  end
  local i = 1
  while true do
    local open = string.find(s, '"', i, true)
    if not open then
      return false
    end
    local j = open + 1
    while true do
      local k = string.find(s, '[%z\1-\31"\\]', j)
      if not k then
        return false -- an unterminated string: cjson refuses the text
      end
      local c = string.byte(s, k)
      if c == 34 then -- the closing quote
        i = k + 1
        break
      elseif c == 92 then -- a backslash escapes the next byte
        j = k + 2
      else
        return true
      end
    end
  end
end

-- bad_meta says why a job's meta field is not a JSON object of strings,
-- or answers nil (also when there is none). A claim hands the field to Go
-- as stored; this check is what lets Go decode it, so a hand-edited field
-- makes the job corrupt (dead, with the reason) instead of failing every
-- claim that pops it.
local function bad_meta(meta)
  if not meta then
    return nil
  end
  if raw_in_string(meta) then
    return 'field meta holds a raw control character in a string'
  end
  local ok, m = pcall(cjson.decode, meta)
  if string.sub(meta, 1, 1) ~= '{' or not ok or type(m) ~= 'table' then
    return 'field meta is not a JSON object'
  end
  -- A null value passes: miniredis's cjson drops it from the table, so
  -- only accepting it reads the same on both servers (Go reads it as "").
  for k, v in pairs(m) do
    if type(k) ~= 'string' or type(v) ~= 'string' and v ~= cjson.null then
      return 'field meta is not a JSON object of strings'
    end
  end
  return nil
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

-- Throughput counters (broker.Throughput). A minute is floor(now / 60000)
-- of Redis time. The stats hash keeps only the minutes of the window that
-- ends at its head, [head - STATS_MINUTES + 1, head]: whoever moves the
-- head deletes the minutes that fall out of it, so the hash never holds
-- more than 2 * STATS_MINUTES + 1 fields and nothing ever scans it
-- (invariant 8). STATS_MINUTES is broker.ThroughputKept in minutes.
local STATS_MINUTES = 360

-- stats_advance moves the stats window's head to minute m. The minutes
-- that fall out go in one HDEL (at most STATS_MINUTES of them); a jump of
-- a whole window or more, or a clock gone back past the window (a
-- failover to a server whose clock is behind), empties the hash, at most
-- 2 * STATS_MINUTES + 1 fields. It answers whether it emptied the hash.
-- only_if_kept: leave a hash without a head alone (trim: nothing counted).
local function stats_advance(m, only_if_kept)
  local head = redis.pcall('HGET', K.stats, 'head')
  if type(head) == 'table' then
    return false -- not a hash (a hand edit): Throughput says so
  end
  head = tonumber(head)
  if not is_int(head) then
    if only_if_kept then
      return false
    end
    if redis.call('HLEN', K.stats) > 1 then
      -- Fields without a head (a hand edit): their minutes are unknown.
      redis.call('DEL', K.stats)
      return true
    end
    redis.call('HSET', K.stats, 'head', int(m))
    return false
  end
  if m > head - STATS_MINUTES and m <= head then
    return false
  end
  if m <= head - STATS_MINUTES or m - head >= STATS_MINUTES then
    redis.call('DEL', K.stats)
    return true
  end
  local gone = {}
  for old = head - STATS_MINUTES + 1, m - STATS_MINUTES do
    table.insert(gone, int(old) .. ':d')
    table.insert(gone, int(old) .. ':f')
  end
  if #gone > 0 then
    redis.call('HDEL', K.stats, unpack(gone))
  end
  redis.call('HSET', K.stats, 'head', int(m))
  return false
end

-- count_settled adds n settlements of a kind ('d' done, 'f' failed) to
-- the minute of now: one HINCRBY, and when that creates the minute's
-- field (its value is n), a move of the window's head. A stats key that
-- is not a hash of integers (a hand edit) costs the count, never the
-- settlement: Redis would not undo the script's earlier writes.
local function count_settled(kind, n, now)
  if n <= 0 then
    return
  end
  local m = math.floor(now / 60000)
  local field = int(m) .. ':' .. kind
  local v = redis.pcall('HINCRBY', K.stats, field, n)
  if v == n and stats_advance(m, false) then
    redis.call('HSET', K.stats, field, n, 'head', int(m))
  end
end

-- ERRORS_KEPT and ERROR_BYTES bound a job's error history, the field
-- 'errors': a JSON array of {attempt, at, error}, oldest first.
local ERRORS_KEPT = 10
local ERROR_BYTES = 2048

-- record_error appends one attempt's error to the job's history, keeping
-- the last ERRORS_KEPT, each cut to ERROR_BYTES at a UTF-8 boundary. A
-- history that does not decode (a hand edit) starts again from this one.
local function record_error(key, attempt, now, err)
  if #err > ERROR_BYTES then
    local cut = ERROR_BYTES
    -- Step back over continuation bytes so no character is split.
    while cut > 0 and string.byte(err, cut + 1) >= 128 and string.byte(err, cut + 1) < 192 do
      cut = cut - 1
    end
    err = string.sub(err, 1, cut)
  end
  local list = {}
  local old = redis.call('HGET', key, F.errors)
  if old then
    local ok, decoded = pcall(cjson.decode, old)
    if ok and type(decoded) == 'table' and #decoded <= ERRORS_KEPT then
      for k, v in pairs(decoded) do
        ok = ok and type(k) == 'number' and type(v) == 'table' and type(v.attempt) == 'number'
          and type(v.at) == 'number' and type(v.error) == 'string'
      end
      if ok then
        list = decoded
      end
    end
  end
  table.insert(list, {attempt = tonumber(attempt) or 0, at = now, error = err})
  while #list > ERRORS_KEPT do
    table.remove(list, 1)
  end
  -- An encoding error must not abort the script half-way, after the
  -- settlement's writes: the history is what is given up.
  local ok, encoded = pcall(cjson.encode, list)
  if ok then
    redis.call('HSET', key, F.errors, encoded)
  end
end

-- rank_after is the rank at which a listing of index that steps goes on
-- after the entry it read last, (score, id), reading from the head, or
-- from the end when newest: just after id while it is still listed at
-- that score, else where it was, after the entries scored before it
-- (entries at that score may be read again; the listing drops what it has
-- already read). Entries that left ahead of it never move it past one
-- that stayed, as a rank kept from the step before would. Every listing
-- that steps goes on by this rule: JobPage's cursor, Jobs, RetryDead,
-- Leases (range.lua, leases.lua).
local function rank_after(index, score, id, newest)
  local at = redis.call('ZSCORE', index, id)
  if at and tonumber(at) == tonumber(score) then
    if newest then
      return redis.call('ZREVRANK', index, id) + 1
    end
    return redis.call('ZRANK', index, id) + 1
  end
  if newest then
    return redis.call('ZCOUNT', index, '(' .. score, '+inf')
  end
  return redis.call('ZCOUNT', index, '-inf', '(' .. score)
end
