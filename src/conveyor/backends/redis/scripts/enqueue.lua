-- enqueue.lua: insert N new jobs (-> scheduled | available), with dedup.
--
-- KEYS[1] <prefix>seq     insertion counter (claim order within a priority)
-- KEYS[2] <prefix>due     scheduled/retryable jobs by run_at
-- KEYS[3] <prefix>unique  unique_key -> id of the latest job holding it
-- KEYS[4] <prefix>queues  set of every queue name seen
-- ARGV[1] key prefix, e.g. "{conveyor}:"
-- ARGV[2] now (epoch seconds; also created_at)
-- ARGV[3] N, then 12 values per job:
--         id, queue, task, payload, state (scheduled|available, decided by the caller
--         from run_at and now), priority, max_attempts, run_at, unique_key?,
--         unique_for?, timeout?, meta   (? = optional: '' or '~' .. value)
-- Returns one entry per job: 0 when inserted, or the existing job (HGETALL) that
-- this one duplicates (same id, or same unique_key; active, or completed within
-- its unique_for window). A finished job whose window is over makes way for the new one.

local now_text = ARGV[2]
local now = tonumber(now_text)
local n = tonumber(ARGV[3])
local out = {}
for i = 0, n - 1 do
  local a = 4 + i * 12
  local id, queue, state = ARGV[a], ARGV[a + 1], ARGV[a + 4]
  local unique_key = optional(ARGV[a + 8])
  local existing = load(id)
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
    if existing then delete_job(id, existing) end  -- finished, window over: replace it
    local seq = redis.call('INCR', SEQ)
    local f = { priority = ARGV[a + 5], run_at = ARGV[a + 7], seq = seq }
    local key = job_key(id)
    redis.call('HSET', key, 'id', id, 'queue', queue, 'task', ARGV[a + 2],
      'payload', ARGV[a + 3], 'state', state, 'priority', f.priority,
      'max_attempts', ARGV[a + 6], 'run_at', f.run_at, 'created_at', now_text,
      'seq', seq, 'attempt', 0, 'lease_token', 0, 'meta', ARGV[a + 11])
    if unique_key then
      redis.call('HSET', key, 'unique_key', unique_key)
      redis.call('HSET', UNIQUE, unique_key, id)
    end
    local unique_for, timeout = optional(ARGV[a + 9]), optional(ARGV[a + 10])
    if unique_for then redis.call('HSET', key, 'unique_for', unique_for) end
    if timeout then redis.call('HSET', key, 'timeout', timeout) end
    index_job(id, queue, state, f)
    redis.call('SADD', QUEUES, queue)
    if state == 'available' then wake(queue) end
    out[#out + 1] = 0
  end
end
return out
