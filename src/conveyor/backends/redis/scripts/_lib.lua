-- _lib.lua: helpers shared by every script. Not a script itself: the loader
-- (conveyor/backends/redis/lua.py) puts it in front of each script's body.
--
-- ARGV[1] of every script is the key prefix, e.g. "{conveyor}:". Its hash tag keeps
-- every key of one prefix in one Redis Cluster slot, so the keys a script derives
-- here (job hashes, per-queue indexes) are always local to the node running it.
-- The key layout is documented in keys.py.
--
-- Numbers that must stay exact (times, scores) travel as the strings Python sent:
-- Lua turns a number back into text with 14 significant digits only.

local PREFIX = ARGV[1]
local DUE = PREFIX .. 'due'
local UNIQUE = PREFIX .. 'unique'
local QUEUES = PREFIX .. 'queues'
local PAUSED = PREFIX .. 'paused'
local SEQ = PREFIX .. 'seq'
local JOBS = PREFIX .. 'jobs'  -- every job id by seq: newest-first listing

local function job_key(id) return PREFIX .. 'job:' .. id end
local function state_key(queue, state) return PREFIX .. 'q:' .. queue .. ':' .. state end
local function wake_key(queue) return PREFIX .. 'q:' .. queue .. ':wake' end

-- conveyor.lifecycle.ALLOWED; tests/backends/redis/test_scripts.py keeps the two in step.
local ALLOWED = {
  ['scheduled>available'] = true, ['retryable>available'] = true,
  ['available>running'] = true,
  ['running>completed'] = true, ['running>retryable'] = true, ['running>dead'] = true,
  ['running>scheduled'] = true, ['running>available'] = true, ['running>cancelled'] = true,
  ['scheduled>cancelled'] = true, ['available>cancelled'] = true,
  ['retryable>cancelled'] = true,
  ['dead>available'] = true, ['cancelled>available'] = true,
}
local ACTIVE = { scheduled = true, available = true, running = true, retryable = true }
local WAITING = { scheduled = true, available = true, retryable = true }
local FINISHED = { completed = true, cancelled = true, dead = true }

-- Per-job outcome codes, returned (never raised) to the Python side.
local E_STALE = 'stale'      -- not running, or the lease token is not the current one
local E_ILLEGAL = 'illegal'  -- the transition is not in conveyor.lifecycle.ALLOWED

local function allowed(old, new)
  return ALLOWED[old .. '>' .. new] == true
end

-- The fence: a write about a running job counts only from the holder of its current
-- lease (f as loaded by load(); token as the worker sent it).
local function holds_lease(f, token)
  return f ~= nil and f.state == 'running' and f.lease_token == token
end

-- Claim order inside one priority: run_at, then insertion order. Members of the
-- available index are "<run_at in microseconds, 17 digits><seq, 12 digits><id>",
-- all scored -priority, so ZPOPMIN pops the highest priority, then the lowest member.
local RANK_LEN = 29
local function rank(run_at, seq, id)
  local micros = math.floor(tonumber(run_at) * 1000000)
  if micros < 0 then micros = 0 end
  return string.format('%017.0f%012d', micros, tonumber(seq)) .. id
end

local FIELDS = {
  'state', 'queue', 'priority', 'run_at', 'seq', 'rank', 'lease_token', 'attempt',
  'max_attempts', 'lease_expires_at', 'finished_at', 'unique_key', 'unique_for',
  'worker_id', 'errors',
}

-- The fields the scripts decide on, as a table (absent fields are nil), or nil.
local function load(id)
  local values = redis.call('HMGET', job_key(id), unpack(FIELDS))
  if not values[1] then return nil end
  local f = {}
  for i, name in ipairs(FIELDS) do
    if values[i] then f[name] = values[i] end
  end
  return f
end

-- Put a job into the index of `state` (f holds the fields the score needs).
local function index_job(id, queue, state, f)
  if state == 'available' then
    local r = rank(f.run_at, f.seq, id)
    redis.call('HSET', job_key(id), 'rank', r)
    redis.call('ZADD', state_key(queue, 'available'), -tonumber(f.priority), r)
  elseif state == 'scheduled' or state == 'retryable' then
    redis.call('ZADD', state_key(queue, state), f.run_at, id)
    redis.call('ZADD', DUE, f.run_at, id)
  elseif state == 'running' then
    redis.call('ZADD', state_key(queue, state), f.lease_expires_at or '0', id)
  else
    redis.call('ZADD', state_key(queue, state), f.finished_at or '0', id)
  end
end

local function unindex_job(id, f)
  if f.state == 'available' then
    if f.rank then redis.call('ZREM', state_key(f.queue, 'available'), f.rank) end
    redis.call('HDEL', job_key(id), 'rank')
  else
    redis.call('ZREM', state_key(f.queue, f.state), id)
    if f.state == 'scheduled' or f.state == 'retryable' then redis.call('ZREM', DUE, id) end
  end
end

local function forget_unique(id, unique_key)
  if unique_key and redis.call('HGET', UNIQUE, unique_key) == id then
    redis.call('HDEL', UNIQUE, unique_key)
  end
end

-- Remove a job record and every index entry pointing at it.
local function delete_job(id, f)
  unindex_job(id, f)
  forget_unique(id, f.unique_key)
  redis.call('ZREM', JOBS, id)
  redis.call('DEL', job_key(id))
end

-- Count-based retention: keep at most `max` jobs in a finished state of a queue
-- (oldest finished go first). max <= 0 means no bound.
local function trim_finished(queue, state, max)
  if max <= 0 then return end
  local key = state_key(queue, state)
  local excess = redis.call('ZCARD', key) - max
  if excess <= 0 then return end
  local old = redis.call('ZRANGE', key, 0, excess - 1)
  for _, id in ipairs(old) do
    forget_unique(id, redis.call('HGET', job_key(id), 'unique_key'))
    redis.call('DEL', job_key(id))
  end
  redis.call('ZREM', JOBS, unpack(old))
  redis.call('ZREMRANGEBYRANK', key, 0, excess - 1)
end

local function append_error(id, errors, error_json)
  local merged
  if not errors or errors == '[]' or errors == '' then
    merged = '[' .. error_json .. ']'
  else
    merged = string.sub(errors, 1, -2) .. ',' .. error_json .. ']'
  end
  redis.call('HSET', job_key(id), 'errors', merged)
end

-- A hint for idle workers (BLPOP on the queue's wake list); one token is enough.
local function wake(queue)
  local key = wake_key(queue)
  if redis.call('LLEN', key) == 0 then redis.call('RPUSH', key, '1') end
end

-- A job is "live" for dedup while active, or completed within its unique_for window.
local function is_live(f, now)
  if ACTIVE[f.state] then return true end
  return f.state == 'completed' and f.unique_for ~= nil and f.finished_at ~= nil
    and tonumber(f.finished_at) + tonumber(f.unique_for) > now
end

-- Optional string arguments arrive as '' (absent) or '~' .. value.
local function optional(arg)
  if arg == nil or arg == '' then return nil end
  return string.sub(arg, 2)
end

-- A shared record's value if it is live at `now` (by the expiry zset), else nil.
local function live_record(values, expiries, key, now)
  local value = redis.call('HGET', values, key)
  if not value then return nil end
  local expires_at = redis.call('ZSCORE', expiries, key)
  if expires_at and tonumber(expires_at) <= tonumber(now) then return nil end
  return value
end

-- Store a shared record with its expiry ('' for none), replacing any previous one.
local function put_record(values, expiries, key, value, expires_at)
  redis.call('HSET', values, key, value)
  if expires_at == '' then
    redis.call('ZREM', expiries, key)
  else
    redis.call('ZADD', expiries, expires_at, key)
  end
end

-- -- end of _lib.lua --
