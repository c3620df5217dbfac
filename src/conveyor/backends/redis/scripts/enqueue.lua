-- enqueue.lua: insert N new jobs (-> scheduled | available), with dedup.
--
-- KEYS[1] <prefix>seq     insertion counter (claim order within a priority)
-- KEYS[2] <prefix>due     scheduled/retryable jobs by run_at
-- KEYS[3] <prefix>unique  unique_key -> id of the latest job holding it
-- KEYS[4] <prefix>queues  set of every queue name seen
-- KEYS[5] <prefix>jobs    every job id by seq (newest-first listing)
-- ARGV[1] key prefix, e.g. "{conveyor}:"
-- ARGV[2] now (epoch seconds; also created_at)
-- ARGV[3..] 14 arguments per job, all strings (no number goes through Lua's 14-digit
--         formatting): id, queue, task, payload, state (scheduled|available, decided
--         by the caller from run_at and now), priority, max_attempts, run_at,
--         the claim time in whole microseconds (17 digits, for the claim rank: run_at,
--         or with aging run_at - priority * aging), unique_key ('' when absent, else
--         '~' .. key: an empty key is a key), unique_for?, timeout?, meta?, aging?
--         (? = optional: '' when absent)
-- Returns one entry per job: 0 when inserted, or the existing job (HGETALL) that
-- this one duplicates (same id, or same unique_key; active, or completed within
-- its unique_for window). A finished job whose window is over makes way for the new one.

local now_text = ARGV[2]
local now = tonumber(now_text)
local out = {}
for j = 3, #ARGV, 14 do
  local id, queue, state = ARGV[j], ARGV[j + 1], ARGV[j + 4]
  local unique_key = optional(ARGV[j + 9])
  local key = job_key(id)
  -- Cheap liveness check first; the full record is read only to replace it.
  local v = redis.call('HMGET', key, 'state', 'finished_at', 'unique_for')
  local existing = v[1] and { state = v[1], finished_at = v[2] or nil, unique_for = v[3] or nil }
  local duplicate = nil
  if existing and is_live(existing, now) then
    duplicate = id
  elseif unique_key then
    local holder = redis.call('HGET', UNIQUE, unique_key)
    if holder then
      local held = load(holder)
      if held and is_live(held, now) then duplicate = holder end
    end
  end
  if duplicate then
    out[#out + 1] = job_reply(duplicate)
  elseif state ~= 'scheduled' and state ~= 'available' then
    return redis.error_reply('CONVEYOR_ILLEGAL_TRANSITION new job cannot start ' .. state)
  else
    if existing then delete_job(id, load(id)) end  -- finished, window over: replace it
    local seq = redis.call('INCR', SEQ)
    -- attempt and lease_token start at 0 and meta at {}: absent fields read as those
    -- (job_from_hash; HINCRBY counts from 0), and every field less is time saved here.
    local fields = { 'id', id, 'queue', queue, 'task', ARGV[j + 2], 'payload', ARGV[j + 3],
      'state', state, 'priority', ARGV[j + 5], 'max_attempts', ARGV[j + 6],
      'run_at', ARGV[j + 7], 'created_at', now_text, 'seq', seq }
    local n = #fields
    if unique_key then
      fields[n + 1] = 'unique_key'; fields[n + 2] = unique_key; n = n + 2
      redis.call('HSET', UNIQUE, unique_key, id)
    end
    local unique_for, timeout, meta = ARGV[j + 10], ARGV[j + 11], ARGV[j + 12]
    local aging = ARGV[j + 13]
    if unique_for ~= '' then fields[n + 1] = 'unique_for'; fields[n + 2] = unique_for; n = n + 2 end
    if timeout ~= '' then fields[n + 1] = 'timeout'; fields[n + 2] = timeout; n = n + 2 end
    if meta ~= '' then fields[n + 1] = 'meta'; fields[n + 2] = meta; n = n + 2 end
    if aging ~= '' then fields[n + 1] = 'aging'; fields[n + 2] = aging; n = n + 2 end
    if state == 'available' then
      -- index_job, inlined: the rank goes into the same HSET (the hot path of enqueue)
      local digits = tostring(seq)
      local r = ARGV[j + 8] .. string.rep('0', 12 - #digits) .. digits .. id
      fields[n + 1] = 'rank'; fields[n + 2] = r
      redis.call('HSET', key, unpack(fields))
      -- Scored -priority, or 0 with aging (claim_place of _lib.lua)
      redis.call('ZADD', state_key(queue, 'available'), aging == '' and -tonumber(ARGV[j + 5]) or 0, r)
      wake(queue)
    else
      redis.call('HSET', key, unpack(fields))
      index_job(id, queue, state, { run_at = ARGV[j + 7] })  -- scheduled: ranked when due
    end
    redis.call('SADD', QUEUES, queue)
    redis.call('ZADD', JOBS, seq, id)
    out[#out + 1] = 0
  end
end
return out
