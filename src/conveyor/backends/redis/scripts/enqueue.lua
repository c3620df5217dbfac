-- enqueue.lua: insert N new jobs (-> scheduled | available), with dedup.
--
-- KEYS[1] <prefix>seq     insertion counter (claim order within a priority)
-- KEYS[2] <prefix>due     scheduled/retryable jobs by run_at
-- KEYS[3] <prefix>unique  unique_key -> id of the latest job holding it
-- KEYS[4] <prefix>queues  set of every queue name seen
-- KEYS[5] <prefix>jobs    every job id by seq (newest-first listing)
-- ARGV[1] key prefix, e.g. "{conveyor}:"
-- ARGV[2] now (epoch seconds; also created_at)
-- ARGV[3..] one argument per job: a JSON array of 12 strings (one argument instead
--         of twelve halves the client's packing cost; all strings, so no number
--         goes through Lua's 14-digit formatting):
--         id, queue, task, payload, state (scheduled|available, decided by the caller
--         from run_at and now), priority, max_attempts, run_at, unique_key?,
--         unique_for?, timeout?, meta   (? = optional: '' or '~' .. value)
-- Returns one entry per job: 0 when inserted, or the existing job (HGETALL) that
-- this one duplicates (same id, or same unique_key; active, or completed within
-- its unique_for window). A finished job whose window is over makes way for the new one.

local now_text = ARGV[2]
local now = tonumber(now_text)
local out = {}
for j = 3, #ARGV do
  local f = cjson.decode(ARGV[j])
  local id, queue, state = f[1], f[2], f[5]
  local unique_key = optional(f[9])
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
    out[#out + 1] = redis.call('HGETALL', job_key(duplicate))
  elseif state ~= 'scheduled' and state ~= 'available' then
    return redis.error_reply('CONVEYOR_ILLEGAL_TRANSITION new job cannot start ' .. state)
  else
    if existing then delete_job(id, load(id)) end  -- finished, window over: replace it
    local seq = redis.call('INCR', SEQ)
    local priority, run_at = f[6], f[8]
    local fields = { 'id', id, 'queue', queue, 'task', f[3], 'payload', f[4],
      'state', state, 'priority', priority, 'max_attempts', f[7], 'run_at', run_at,
      'created_at', now_text, 'seq', seq, 'attempt', 0, 'lease_token', 0, 'meta', f[12] }
    local unique_for, timeout = optional(f[10]), optional(f[11])
    if unique_key then
      fields[#fields + 1] = 'unique_key'; fields[#fields + 1] = unique_key
      redis.call('HSET', UNIQUE, unique_key, id)
    end
    if unique_for then fields[#fields + 1] = 'unique_for'; fields[#fields + 1] = unique_for end
    if timeout then fields[#fields + 1] = 'timeout'; fields[#fields + 1] = timeout end
    if state == 'available' then
      -- index_job, inlined: the rank goes into the same HSET (the hot path of enqueue)
      local r = rank(run_at, seq, id)
      fields[#fields + 1] = 'rank'; fields[#fields + 1] = r
      redis.call('HSET', key, unpack(fields))
      redis.call('ZADD', state_key(queue, 'available'), -tonumber(priority), r)
      wake(queue)
    else
      redis.call('HSET', key, unpack(fields))
      index_job(id, queue, state, { run_at = run_at })
    end
    redis.call('SADD', QUEUES, queue)
    redis.call('ZADD', JOBS, seq, id)
    out[#out + 1] = 0
  end
end
return out
