-- _lib.lua: helpers shared by every script. Not a script itself: the loader
-- (conveyor/backends/redis/script_sources.py) puts it in front of each script's body.
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
local SHED = PREFIX .. 'shed'  -- queue -> jobs it shed, ever (QueueStats.shed)
local SEQ = PREFIX .. 'seq'
local JOBS = PREFIX .. 'jobs'  -- every job id by seq: newest-first listing
-- Ids someone waits to see end (job.result(), FinishWakeups), by how many wait.
local WATCHING = PREFIX .. 'watching'
-- Completed jobs whose result expires (result_ttl): id by result_expires_at.
local RESULT_EXPIRIES = PREFIX .. 'result_expiries'

local function job_key(id) return PREFIX .. 'job:' .. id end
local function state_key(queue, state) return PREFIX .. 'q:' .. queue .. ':' .. state end
local function wake_key(queue) return PREFIX .. 'q:' .. queue .. ':wake' end
-- Every waiting (scheduled, available, retryable) job of a queue by seq: the depth a
-- bounded queue is held to, and its oldest jobs to shed (conveyor.rules.backpressure).
local function waiting_key(queue) return PREFIX .. 'q:' .. queue .. ':waiting' end
-- Per-key concurrency (conveyor.rules.concurrency): the ids holding a key's slots (running,
-- or available and in their queue's available index), and the key's parked available
-- jobs, members and scores as in a queue's available index (claim order).
local function holders_key(ckey) return PREFIX .. 'ck:' .. ckey .. ':held' end
local function parked_key(ckey) return PREFIX .. 'ck:' .. ckey .. ':parked' end
-- A key's limit set by its adaptive controller (conveyor.rules.adaptive), in place of its
-- jobs' own concurrency_limit.
local function key_limit_key(ckey) return PREFIX .. 'ck:' .. ckey .. ':limit' end
-- A queue's parked jobs by seq: available to listings and stats, not to the claim.
local function queue_parked_key(queue) return PREFIX .. 'q:' .. queue .. ':parked' end
-- Rate limits (docs/flow-control.md): an available job that names a bucket (its
-- rate_key) is in its queue's lane for that bucket instead of the queue's available
-- index, so a throttled backlog is never looked at by the claims of other jobs; the
-- queue's `lanes` set names its buckets, for stats and listings. The lane's key is
-- length-prefixed, so no two (queue, bucket) pairs share one. A bucket is a hash.
local function lane_key(queue, rate_key)
  return PREFIX .. 'rl:' .. #queue .. ':' .. queue .. ':' .. rate_key
end
local function lanes_key(queue) return PREFIX .. 'q:' .. queue .. ':lanes' end
local function bucket_key(rate_key) return PREFIX .. 'rate:' .. rate_key end
local function available_key(queue, rate_key)
  if rate_key then return lane_key(queue, rate_key) end
  return state_key(queue, 'available')
end

-- conveyor.model.lifecycle.ALLOWED; tests/backends/redis/test_scripts.py keeps the two in step.
local ALLOWED = {
  ['scheduled>available'] = true, ['retryable>available'] = true,
  ['available>running'] = true,
  ['running>completed'] = true, ['running>retryable'] = true, ['running>dead'] = true,
  ['running>scheduled'] = true, ['running>available'] = true, ['running>cancelled'] = true,
  ['scheduled>cancelled'] = true, ['available>cancelled'] = true,
  ['retryable>cancelled'] = true,
  ['dead>available'] = true, ['cancelled>available'] = true,
  ['blocked>available'] = true, ['blocked>cancelled'] = true, ['cancelled>blocked'] = true,
}
local ACTIVE = { blocked = true, scheduled = true, available = true, running = true,
  retryable = true }
local KNOWN = { blocked = true, scheduled = true, available = true, running = true,
  retryable = true, completed = true, cancelled = true, dead = true }
local WAITING = { scheduled = true, available = true, retryable = true }
local FINISHED = { completed = true, cancelled = true, dead = true }

-- Per-job outcome codes, returned (never raised) to the Python side.
local E_STALE = 'stale'      -- not running, or the lease token is not the current one
local E_ILLEGAL = 'illegal'  -- the transition is not in conveyor.model.lifecycle.ALLOWED

local function allowed(old, new)
  return ALLOWED[old .. '>' .. new] == true
end

-- Stored values are read defensively. Redis does not roll back a script that fails
-- half-way: a field that is not what it should be (written by something else, or
-- corrupted) must never stop a script after it took a job out of one index and before
-- it put it in the next. So a number that does not read as one takes a default here
-- (the job codec reports the field as corrupt), and nothing below does arithmetic or
-- comparisons on a raw field.

-- A stored number (a finite one), else `default`.
local function as_number(value, default)
  local n = tonumber(value)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return default end
  return n
end

-- A stored lease token or count as the text of a whole number, else `default`.
local function whole_text(value, default)
  if value and string.match(value, '^%-?%d+$') then return value end
  return default
end

-- The fence: a write about a running job counts only from the holder of its current
-- lease (f as loaded by load(); token as the worker sent it). A stored token that is
-- not a whole number reads as '0', which no claim hands out: only the rescuer, which
-- reads it the same way (find_leases.lua), can end that attempt.
local function holds_lease(f, token)
  return f ~= nil and f.state == 'running' and whole_text(f.lease_token, '0') == token
end

-- Claim order inside one priority: run_at, then insertion order. Members of the
-- available index are "<run_at in microseconds, 17 digits><seq, 12 digits><id>",
-- all scored -priority, so ZPOPMIN pops the highest priority, then the lowest member.
-- Both numbers are clamped to their digits, so the id always starts at RANK_LEN + 1.
-- A job with priority aging (a positive `aging` field: seconds of waiting worth one
-- level) is scored 0 and ranked at run_at - priority * aging instead, the claim key
-- of conveyor.backends.claiming.claim_rank: a static key, so aging costs no scan.
local RANK_LEN = 29
-- Tenant fairness (conveyor.rules.fairness): a job with a fairness key has a `fair_vtime`
-- field (17 digits), and its member is "v<vtime:17>" in front of the one above, so
-- within one score its queue's keyed jobs follow the unkeyed ones ('v' sorts after
-- every digit: vtime 0) by vtime, then run_at, then seq. Members without the prefix
-- (every one written before fairness) read as ever.
local FAIR_LEN = 18
local VTIME_MAX = 9007199254740991  -- 2^53 - 1: Lua's doubles count whole numbers to it
local function fair_prefix(fair_vtime)
  if not fair_vtime then return '' end
  local v = math.max(0, math.min(math.floor(as_number(fair_vtime, 0)), VTIME_MAX))
  return string.format('v%017.0f', v)
end

-- The id of an available-index member.
local function rank_id(member)
  if string.byte(member, 1) == 118 then return string.sub(member, FAIR_LEN + RANK_LEN + 1) end
  return string.sub(member, RANK_LEN + 1)
end

local function fair_key(queue) return PREFIX .. 'q:' .. queue .. ':fair' end
local function vtime_key(queue) return PREFIX .. 'q:' .. queue .. ':vtime' end

-- A new job's vtime (as 17 digits) for `key` in `queue`, recorded as the key's last:
-- max(the key's last, the queue's) + step.
local function next_vtime(queue, key, step)
  local last = as_number(redis.call('HGET', fair_key(queue), key), 0)
  local present = as_number(redis.call('GET', vtime_key(queue)), 0)
  local v = math.min(math.max(last, present) + step, VTIME_MAX)
  local text = string.format('%017.0f', v)
  redis.call('HSET', fair_key(queue), key, text)
  return text
end

-- A claim of `queue` took keyed jobs up to vtime `reached`: the queue's vtime moves up.
local function advance_vtime(queue, reached)
  if as_number(redis.call('GET', vtime_key(queue)), 0) < reached then
    redis.call('SET', vtime_key(queue), string.format('%017.0f', reached))
  end
end

-- The vtime of a claimed member, or nil for an unkeyed one.
local function member_vtime(member)
  if string.byte(member, 1) ~= 118 then return nil end
  return as_number(string.sub(member, 2, FAIR_LEN), nil)
end

local MAX_MICROS = 99999999999999984  -- the largest double below 10^17: 17 digits
local function rank(run_at, seq, id)
  local micros = math.floor(as_number(run_at, 0) * 1000000)
  micros = math.max(0, math.min(micros, MAX_MICROS))
  local s = math.max(0, math.min(math.floor(as_number(seq, 0)), 999999999999))
  return string.format('%017.0f%012d', micros, s) .. id
end

-- The score and the time of a job's place in the available index (see rank). An
-- aging value that is not a positive number counts as none (the codec reports it).
local function claim_place(f)
  local priority, run_at = as_number(f.priority, 0), as_number(f.run_at, 0)
  local aging = as_number(f.aging, 0)
  if aging > 0 then return 0, run_at - priority * aging end
  return -priority, run_at
end

local FIELDS = {
  'state', 'queue', 'priority', 'run_at', 'seq', 'rank', 'lease_token', 'attempt',
  'max_attempts', 'lease_expires_at', 'finished_at', 'unique_key', 'unique_for',
  'worker_id', 'errors', 'aging', 'fair_vtime', 'dependants', 'concurrency_key',
  'concurrency_limit', 'rate_key',
}

-- The fields the scripts decide on, as a table (absent fields are nil, but queue
-- is always a string: a key name is built from it), or nil.
local function load(id)
  local values = redis.call('HMGET', job_key(id), unpack(FIELDS))
  if not values[1] then return nil end
  local f = {}
  for i, name in ipairs(FIELDS) do
    if values[i] then f[name] = values[i] end
  end
  f.queue = f.queue or ''
  return f
end

-- A job as scripts return it: HGETALL, then its id, which wins over the stored id
-- field (conveyor.backends.codec): a job is always settled under the key it lives at.
local function job_reply(id)
  local row = redis.call('HGETALL', job_key(id))
  row[#row + 1] = 'id'
  row[#row + 1] = id
  return row
end

-- A hint for idle workers (BLPOP on the queue's wake list); one token is enough.
local function wake(queue)
  local key = wake_key(queue)
  if redis.call('LLEN', key) == 0 then redis.call('RPUSH', key, '1') end
end

-- Unpark a key's next parked jobs (into their queue's available index, holding a
-- slot), in claim order, while fewer jobs hold a slot than the key's limit: its set
-- limit (key_limit_key) if it has one, else the next job's own. An
-- entry whose job is no longer parked there (written over by something else) is
-- dropped. Called when a job is indexed after every move of a keyed job but the
-- claim, which keeps the slot its job held, and when the key's set limit changes.
local function rebalance(ckey)
  local held, parked = holders_key(ckey), parked_key(ckey)
  local set_limit = redis.call('GET', key_limit_key(ckey))
  while true do
    local head = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
    if not head[1] then return end
    local id = rank_id(head[1])
    local v = redis.call('HMGET', job_key(id), 'state', 'queue', 'concurrency_limit', 'rank',
      'concurrency_key', 'rate_key')
    if v[1] ~= 'available' or v[4] ~= head[1] or v[5] ~= ckey then
      redis.call('ZREM', parked, head[1])
    else
      if redis.call('SCARD', held) >= as_number(set_limit or v[3], 1) then return end
      redis.call('ZREM', parked, head[1])
      redis.call('ZREM', queue_parked_key(v[2] or ''), id)
      redis.call('SADD', held, id)
      -- Into its queue's available index, or its rate limit bucket's lane there.
      redis.call('ZADD', available_key(v[2] or '', v[6] or nil), head[2], head[1])
      if v[6] then redis.call('SADD', lanes_key(v[2] or ''), v[6]) end
      wake(v[2] or '')
    end
  end
end

-- Put a job into the index of `state` (f holds the fields the score needs). A keyed
-- job entering available is parked, and its key rebalanced (see rebalance).
local function index_job(id, queue, state, f)
  if WAITING[state] then
    redis.call('ZADD', waiting_key(queue), as_number(f.seq, 0), id)
  end
  local ckey = f.concurrency_key
  if state == 'available' then
    local score, at = claim_place(f)
    local r = fair_prefix(f.fair_vtime) .. rank(at, f.seq, id)
    redis.call('HSET', job_key(id), 'rank', r)
    if ckey then
      redis.call('ZADD', parked_key(ckey), score, r)
      redis.call('ZADD', queue_parked_key(queue), as_number(f.seq, 0), id)
    else
      redis.call('ZADD', available_key(queue, f.rate_key), score, r)
      if f.rate_key then redis.call('SADD', lanes_key(queue), f.rate_key) end
    end
  elseif state == 'scheduled' or state == 'retryable' then
    local run_at = as_number(f.run_at, 0)
    redis.call('ZADD', state_key(queue, state), run_at, id)
    redis.call('ZADD', DUE, run_at, id)
  elseif state == 'running' then
    redis.call('ZADD', state_key(queue, state), as_number(f.lease_expires_at, 0), id)
  else
    redis.call('ZADD', state_key(queue, state), as_number(f.finished_at, 0), id)
  end
  if ckey then
    if state == 'running' then redis.call('SADD', holders_key(ckey), id) else rebalance(ckey) end
  end
end

local function unindex_job(id, f)
  if WAITING[f.state] then redis.call('ZREM', waiting_key(f.queue), id) end
  if f.concurrency_key then
    redis.call('SREM', holders_key(f.concurrency_key), id)
    if f.rank then redis.call('ZREM', parked_key(f.concurrency_key), f.rank) end
    redis.call('ZREM', queue_parked_key(f.queue), id)
  end
  if f.state == 'available' then
    if f.rank then redis.call('ZREM', available_key(f.queue, f.rate_key), f.rank) end
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
  redis.call('ZREM', RESULT_EXPIRIES, id)
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
  redis.call('ZREM', RESULT_EXPIRIES, unpack(old))
  redis.call('ZREMRANGEBYRANK', key, 0, excess - 1)
end

-- A history that is not a JSON array (a corrupt one: the error appended is then a
-- CorruptJob naming it) starts again from this error.
local function append_error(id, errors, error_json)
  local merged
  if not errors or errors == '[]' or errors == '' then
    merged = '[' .. error_json .. ']'
  elseif string.sub(errors, 1, 1) == '[' and string.sub(errors, -1) == ']'
      and pcall(cjson.decode, errors) then
    merged = string.sub(errors, 1, -2) .. ',' .. error_json .. ']'
  else
    merged = '[' .. error_json .. ']'
  end
  redis.call('HSET', job_key(id), 'errors', merged)
end


-- A job ended: wake whoever waits for it (BLPOP on its done list, see finish_wakeups.py).
-- Costs a job nobody waits for one ZSCORE.
local function signal_end(id)
  if redis.call('ZSCORE', WATCHING, id) then
    local key = PREFIX .. 'done:' .. id
    redis.call('RPUSH', key, '1')
    redis.call('PEXPIRE', key, 60000)  -- a signal nobody took: gone in a minute
  end
end

-- A job is "live" for dedup while active, or completed within its unique_for window.
local function is_live(f, now)
  if ACTIVE[f.state] then return true end
  local finished_at, unique_for = as_number(f.finished_at, nil), as_number(f.unique_for, nil)
  return f.state == 'completed' and unique_for ~= nil and finished_at ~= nil
    and finished_at + unique_for > now
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

-- Workflows (conveyor.rules.dependencies, docs/workflows.md). A blocked job holds
-- `pending_parents` (its parents not ended) and `allow_failure` ('1' or absent); a
-- parent holds `dependants`, a JSON array of the ids blocked on it (absent for none:
-- all a job outside a workflow pays is that field in load()). The error record of a
-- dependant cancelled by its parent: conveyor.rules.dependencies.dependency_error's.
local function dependency_error(parent, parent_state, now_text, version)
  return '{"attempt":0,"at":' .. now_text .. ',"type":"DependencyFailed","message":'
    .. cjson.encode('parent job ' .. parent .. ' ended ' .. parent_state)
    .. ',"traceback":"","worker_id":"","host":"","version":' .. cjson.encode(version)
    .. ',"app_version":""}'
end

-- The ids of a `dependants` field; a damaged one releases nothing (never fails the script).
local function dependant_ids(text)
  local ok, ids = pcall(cjson.decode, text or '[]')
  if not ok or type(ids) ~= 'table' then return {} end
  local out = {}
  for _, id in ipairs(ids) do
    if type(id) == 'string' then out[#out + 1] = id end
  end
  return out
end

-- conveyor.rules.dependencies.release_dependants: `parent` ended in `parent_state` (f: its
-- fields as loaded). Each blocked dependant loses one pending parent and becomes
-- available at zero; a dead or cancelled parent cancels it instead (unless
-- allow_failure), and the walk goes on to that one's dependants. The script is
-- atomic, so two parents ending at once are two scripts, one after the other.
local function release_dependants(parent, parent_state, f, now_text, version)
  local walk = { { parent, parent_state, f.dependants } }
  while #walk > 0 do
    local item = table.remove(walk)
    for _, child in ipairs(dependant_ids(item[3])) do
      local c = load(child)
      if c and c.state == 'blocked' then
        local key = job_key(child)
        local extra = redis.call('HMGET', key, 'allow_failure', 'pending_parents')
        if (item[2] == 'dead' or item[2] == 'cancelled') and extra[1] ~= '1' then
          unindex_job(child, c)
          redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now_text)
          append_error(child, c.errors, dependency_error(item[1], item[2], now_text, version))
          c.finished_at = now_text
          index_job(child, c.queue, 'cancelled', c)
          signal_end(child)
          if c.dependants then walk[#walk + 1] = { child, 'cancelled', c.dependants } end
        else
          local left = math.floor(as_number(extra[2], 0)) - 1
          if left <= 0 then
            unindex_job(child, c)
            redis.call('HSET', key, 'state', 'available', 'run_at', now_text,
              'pending_parents', '0')
            c.run_at = now_text
            index_job(child, c.queue, 'available', c)
            wake(c.queue)
          else
            redis.call('HSET', key, 'pending_parents', tostring(left))
          end
        end
      end
    end
  end
end

-- conveyor.rules.dependencies.resume_dependants: `parent` (f: its fields) was redriven. The
-- dependants it had cancelled before they ever ran (their last error DependencyFailed)
-- wait again for their parents, counting those not ended, and onwards; one that
-- another parent still fails (dead or cancelled, without allow_failure) stays cancelled.
local function resume_dependants(f)
  local walk = { f.dependants }
  while #walk > 0 do
    for _, child in ipairs(dependant_ids(table.remove(walk))) do
      local c = load(child)
      local ok, errors = pcall(cjson.decode, c and c.errors or '[]')
      local last = ok and type(errors) == 'table' and errors[#errors]
      if c and c.state == 'cancelled' and whole_text(c.attempt, '0') == '0'
          and type(last) == 'table' and last.type == 'DependencyFailed' then
        local key = job_key(child)
        local extra = redis.call('HMGET', key, 'allow_failure', 'parents')
        local failed, pending, seen = 0, 0, {}
        for _, parent in ipairs(dependant_ids(extra[2])) do
          if not seen[parent] then
            seen[parent] = true
            local state = redis.call('HGET', job_key(parent), 'state')
            if state == 'dead' or state == 'cancelled' then
              failed = failed + 1
            elseif state and state ~= 'completed' then
              pending = pending + 1
            end
          end
        end
        if extra[1] == '1' or failed == 0 then
          unindex_job(child, c)
          redis.call('HSET', key, 'state', 'blocked', 'pending_parents', tostring(pending))
          redis.call('HDEL', key, 'finished_at')
          c.finished_at = nil
          index_job(child, c.queue, 'blocked', c)
          if c.dependants then walk[#walk + 1] = c.dependants end
        end
      end
    end
  end
end

-- shed_oldest: cancel the `n` oldest waiting jobs of `queue` (by seq), each keeping
-- `error_json` (why) in its history. An entry whose job is not waiting (written over
-- by something else) is dropped from the index and does not count.
local function shed_oldest(queue, n, now_text, error_json)
  local key = waiting_key(queue)
  while n > 0 do
    local oldest = redis.call('ZRANGE', key, 0, 0)[1]
    if not oldest then return end
    local f = load(oldest)
    if f and WAITING[f.state] and f.queue == queue then
      unindex_job(oldest, f)
      redis.call('HSET', job_key(oldest), 'state', 'cancelled', 'finished_at', now_text)
      append_error(oldest, f.errors, error_json)
      f.finished_at = now_text
      index_job(oldest, queue, 'cancelled', f)
      signal_end(oldest)
      redis.call('HINCRBY', SHED, queue, 1)
      if f.dependants then
        -- The dependants' records name the version the shed record names (the producer's).
        local ok, shed = pcall(cjson.decode, error_json)
        local version = ok and type(shed) == 'table' and shed.version or ''
        release_dependants(oldest, 'cancelled', f, now_text, tostring(version))
      end
      n = n - 1
    else
      redis.call('ZREM', key, oldest)
    end
  end
end

-- Where a new dependant starts (conveyor.rules.dependencies.start_of): its state ('blocked',
-- `ready` with nothing to wait for, or 'cancelled' by a parent that already failed),
-- the parents it waits for, and the failed parent's (id, state).
local function dependant_start(link, ready)
  local pending, failed = {}, nil
  local seen = {}
  for _, parent in ipairs(link.p) do
    if not seen[parent] then
      seen[parent] = true
      local state = redis.call('HGET', job_key(parent), 'state')
      if (state == 'dead' or state == 'cancelled') and not link.a then
        if not failed then failed = { parent, state } end
      elseif state ~= 'completed' and state ~= 'dead' and state ~= 'cancelled' then
        pending[#pending + 1] = parent
      end
    end
  end
  if failed then return 'cancelled', {}, failed end
  if #pending > 0 then return 'blocked', pending, nil end
  return ready, pending, nil
end

-- The arguments of one job in the enqueue scripts' ARGV (enqueue.lua's header).
local JOB_ARGS = 21

-- A batch naming a parent that is neither stored nor earlier in the batch is refused
-- whole, before anything is written.
local function check_parents(links, first)
  local earlier = {}
  for j = first, #ARGV, JOB_ARGS do
    local id = ARGV[j]
    local link = links[id]
    if link then
      for _, parent in ipairs(link.p) do
        if parent == id or (not earlier[parent]
            and redis.call('EXISTS', job_key(parent)) == 0) then
          return redis.error_reply('CONVEYOR_UNKNOWN_PARENT ' .. id .. ' ' .. parent)
        end
      end
    end
    earlier[id] = true
  end
  return nil
end

-- The batch insert of enqueue.lua and enqueue_bounded.lua (their header says the
-- KEYS and ARGV). `shed` cancels a full queue's oldest waiting jobs: the bounded
-- script passes its helper, the plain one (whose jobs carry no bound) nil, so only
-- the bounded script is sent with the helpers shedding takes.
-- With `links` (enqueue_dependants.lua: job id -> {p = parents, a = allow_failure}),
-- the jobs start at ARGV[4] and the linked ones start where dependant_start says.
local function enqueue_batch(shed, links, version)
  local now_text = ARGV[2]
  local now = tonumber(now_text)
  local out = {}
  for j = links and 4 or 3, #ARGV, JOB_ARGS do
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
    local max_waiting, shed_error = tonumber(ARGV[j + 14]), ARGV[j + 15]
    local depth = max_waiting and redis.call('ZCARD', waiting_key(queue))
    if duplicate then
      out[#out + 1] = job_reply(duplicate)
    elseif max_waiting and depth >= max_waiting and shed_error == '' then
      out[#out + 1] = 'full:' .. depth
    elseif state ~= 'scheduled' and state ~= 'available' then
      return redis.error_reply('CONVEYOR_ILLEGAL_TRANSITION new job cannot start ' .. state)
    else
      local link, pending, failed = links and links[id], nil, nil
      if link then state, pending, failed = dependant_start(link, state) end
      if existing then delete_job(id, load(id)) end  -- finished, window over: replace it
      if max_waiting and depth >= max_waiting then
        shed(queue, depth - max_waiting + 1, now_text, shed_error)
      end
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
      local aging, rate_key = ARGV[j + 13], optional(ARGV[j + 20])
      if unique_for ~= '' then fields[n + 1] = 'unique_for'; fields[n + 2] = unique_for; n = n + 2 end
      if timeout ~= '' then fields[n + 1] = 'timeout'; fields[n + 2] = timeout; n = n + 2 end
      if meta ~= '' then fields[n + 1] = 'meta'; fields[n + 2] = meta; n = n + 2 end
      if aging ~= '' then fields[n + 1] = 'aging'; fields[n + 2] = aging; n = n + 2 end
      local fairness_key, fair_vtime = optional(ARGV[j + 16]), nil
      if fairness_key then
        fair_vtime = next_vtime(queue, fairness_key, as_number(ARGV[j + 17], 1000))
        fields[n + 1] = 'fair_vtime'; fields[n + 2] = fair_vtime; n = n + 2
      end
      if link then
        fields[n + 1] = 'pending_parents'; fields[n + 2] = tostring(#pending); n = n + 2
        fields[n + 1] = 'parents'; fields[n + 2] = cjson.encode(link.p); n = n + 2
        if link.a then fields[n + 1] = 'allow_failure'; fields[n + 2] = '1'; n = n + 2 end
        if failed then
          fields[n + 1] = 'finished_at'; fields[n + 2] = now_text; n = n + 2
          fields[n + 1] = 'errors'; n = n + 2
          fields[n] = '[' .. dependency_error(failed[1], failed[2], now_text, version) .. ']'
        end
        for _, parent in ipairs(pending) do
          local parent_key = job_key(parent)
          local ids = dependant_ids(redis.call('HGET', parent_key, 'dependants'))
          ids[#ids + 1] = id
          redis.call('HSET', parent_key, 'dependants', cjson.encode(ids))
        end
      end
      local ckey = optional(ARGV[j + 18])
      if ckey then
        fields[n + 1] = 'concurrency_key'; fields[n + 2] = ckey
        fields[n + 3] = 'concurrency_limit'; fields[n + 4] = ARGV[j + 19]; n = n + 4
      end
      if rate_key then fields[n + 1] = 'rate_key'; fields[n + 2] = rate_key; n = n + 2 end
      if ckey then  -- parked, then its key rebalanced (index_job)
        redis.call('HSET', key, unpack(fields))
        index_job(id, queue, state, { run_at = ARGV[j + 7], seq = seq, priority = ARGV[j + 5],
          aging = aging ~= '' and aging or nil, fair_vtime = fair_vtime, concurrency_key = ckey,
          rate_key = rate_key })
      elseif state == 'available' then
        -- index_job, inlined: the rank goes into the same HSET (the hot path of enqueue)
        local digits = tostring(seq)
        local r = ARGV[j + 8] .. string.rep('0', 12 - #digits) .. digits .. id
        if fair_vtime then r = 'v' .. fair_vtime .. r end
        fields[n + 1] = 'rank'; fields[n + 2] = r
        redis.call('HSET', key, unpack(fields))
        redis.call('ZADD', waiting_key(queue), seq, id)
        -- Scored -priority, or 0 with aging (claim_place of _lib.lua)
        redis.call('ZADD', available_key(queue, rate_key), aging == '' and -tonumber(ARGV[j + 5]) or 0, r)
        if rate_key then redis.call('SADD', lanes_key(queue), rate_key) end
        wake(queue)
      else
        redis.call('HSET', key, unpack(fields))
        index_job(id, queue, state, { run_at = ARGV[j + 7], seq = seq, finished_at = now_text,
                                      rate_key = rate_key })
      end
      redis.call('SADD', QUEUES, queue)
      redis.call('ZADD', JOBS, seq, id)
      -- 0: stored as the caller made it; a dependant started elsewhere (blocked,
      -- cancelled) is sent back as stored, or its caller would see it available.
      out[#out + 1] = (link and state ~= ARGV[j + 4]) and job_reply(id) or 0
    end
  end
  return out
end

-- -- end of _lib.lua --
