-- purge: one step of an operator's purge of a finished state (done, dead
-- or cancelled) of a queue: it reads up to limit entries of the state's
-- index, oldest first, and deletes each job whose hash is in that state at
-- this instant, with its entry. It reads from just after the last entry an
-- earlier step kept (lib.lua's rank_after; the head when none did): every
-- entry read since was deleted, so that is the first one unread. A finished job owes nothing more
-- (finish() freed its unique key and detached its dependents), so this is
-- all it holds.
-- Guard, per job: its hash is in the purged state (a job retried or
-- re-enqueued under the id meanwhile is skipped and stays listed where it
-- is), and its entry is scored at most bound, the newest finish the purge
-- found when it began: a job that finished since, even one retried and
-- finished again, is left for another purge, so a purge ends however busy
-- the queue. A job that finished within lib.lua's RESEND_HORIZON_MS is
-- left too, as retention (trim.lua) leaves it: a re-send of the request
-- that finished it (an ack) or stored it (an enqueue) may still come, and
-- must find it, or the ack would answer stale and the enqueue store the
-- job again, to run twice (invariant 9). An entry whose hash does not
-- exist holds nothing and goes; an entry of a hash in another state or
-- unreadable stays (Check reports it).
-- Bounded (invariant 8): limit entries per call, at most lib.lua's
-- BATCH_CHUNK per command.
-- A re-send (invariant 9) finds the record this call leaves under
-- derived('purged', nonce) for RESEND_HORIZON_MS and answers it again,
-- deleting nothing more.
-- ARGV[2] request nonce  [3] state  [4] bound (ms)  [5] limit
--     [6] score and [7] id of the last entry an earlier step kept ('' for
--     none)
-- Reply: {deleted, skipped, more (1 when the step read limit entries, all
--         at most bound and older than the horizon: more may be left), the score and id of the last
--         entry kept so far (ARGV's when this step kept none), and the
--         jobs left for the horizon (at most bound; counted by the step
--         that reached them, else 0)}
local nonce, state, bound, limit = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local record = derived('purged', nonce)
local r = redis.pcall('GET', record)
if type(r) == 'string' then
  local ok, kept = pcall(cjson.decode, r)
  if ok and type(kept) == 'table' and #kept == 6 then
    return kept
  end
end
local index = INDEX[state]
if not FINAL[state] then
  return redis.error_reply('purge: ' .. tostring(state) .. ' is not a finished state')
end
local from = 0
if ARGV[7] ~= '' then
  from = rank_after(index, ARGV[6], ARGV[7], false)
end
local young = now_ms() - RESEND_HORIZON_MS -- finished at or after this: left
local entries = redis.call('ZRANGE', index, from, from + limit - 1, 'WITHSCORES')
local deleted, skipped, read_n, recent = 0, 0, 0, 0
local last_score, last_id = ARGV[6], ARGV[7]
local gone, keys = {}, {}
for i = 1, #entries, 2 do
  local id, score = entries[i], tonumber(entries[i + 1])
  if score > bound or score >= young then
    if score <= bound then
      recent = redis.call('ZCOUNT', index, int(young), int(bound)) -- left for the horizon
    end
    break
  end
  read_n = read_n + 1
  local key = JOB .. id
  local f, bad = read(key, F.state)
  if f and f[1] == state then
    table.insert(keys, key)
    table.insert(gone, id)
    deleted = deleted + 1
    event('deleted', id, '', state)
  elseif not f and not bad then
    table.insert(gone, id) -- no hash: the entry holds nothing
  else
    skipped = skipped + 1
    last_score, last_id = entries[i + 1], id
  end
end
for i = 1, #keys, BATCH_CHUNK do
  redis.call('DEL', unpack(keys, i, math.min(i + BATCH_CHUNK - 1, #keys)))
end
zrem_all(index, gone)
local out = {deleted, skipped, read_n == limit and 1 or 0, last_score, last_id, recent}
redis.call('SET', record, cjson.encode(out), 'PX', RESEND_HORIZON_MS)
return out
