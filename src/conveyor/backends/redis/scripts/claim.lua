-- claim.lua: stage due jobs (scheduled|retryable -> available), then claim up to
-- `limit` available jobs (available -> running) as a ClaimRequest says, skipping
-- paused queues: first each queue up to its quota, in the order given; then, while
-- short of the limit, each queue that gave its whole quota takes what is left, never
-- more than its ceiling over both passes. Each claim adds 1 to attempt and to lease_token (the
-- fencing token) and records the lease, in the same atomic step as the pop: a job
-- is never "popped but not started".
--
-- KEYS[1] <prefix>due     scheduled/retryable jobs by run_at
-- KEYS[2] <prefix>paused  queue -> "1" when paused
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] lease_expires_at (now + lease seconds, computed by the caller)
-- ARGV[4] worker id
-- ARGV[5] limit: most jobs to claim
-- ARGV[6] stage_limit: most due jobs to stage in this call
-- ARGV[7] n: how many rate limits the worker declares (docs/flow-control.md)
-- ARGV[8..] n triples: bucket name, rate (tokens a second), burst
-- ARGV[8 + 3n..] triples: queue name, quota (most jobs from it in the first pass),
--           ceiling (most from it over both passes; -1: no bound)
-- Returns the claimed jobs, each as HGETALL, in claim order; with n > 0, then when
-- a bucket that still holds back a waiting job of these queues has its next token
-- ('' when none does).

local now_text, lease_expires_at, worker_id = ARGV[2], ARGV[3], ARGV[4]
local limit, stage_limit = tonumber(ARGV[5]), tonumber(ARGV[6])
local n_limits = tonumber(ARGV[7])
local first_queue = 8 + 3 * n_limits

-- Every script keeps a job in the index its state names, so an index entry that
-- disagrees with the job's state field means the field was written by something
-- else. Then a field naming a state wins: the job moves to that state's index. A
-- field naming none (or gone) loses: the index is where the job is.

-- Out of the due index and of both waiting indexes it may be in.
local function leave_due(id, f)
  redis.call('ZREM', DUE, id)
  redis.call('ZREM', waiting_key(f.queue), id)  -- index_job puts a waiting job back
  redis.call('ZREM', state_key(f.queue, 'scheduled'), id)
  redis.call('ZREM', state_key(f.queue, 'retryable'), id)
end

local due = redis.call('ZRANGEBYSCORE', DUE, '-inf', now_text, 'LIMIT', 0, stage_limit)
local woken = {}
for _, id in ipairs(due) do
  local f = load(id)
  if not f then
    redis.call('ZREM', DUE, id)  -- the job is gone
  elseif f.state == 'scheduled' or f.state == 'retryable' or not KNOWN[f.state] then
    if KNOWN[f.state] then unindex_job(id, f) else leave_due(id, f) end
    redis.call('HSET', job_key(id), 'state', 'available')
    index_job(id, f.queue, 'available', f)
    woken[f.queue] = true
  else
    leave_due(id, f)
    index_job(id, f.queue, f.state, f)
  end
end

local claimed = {}

-- Popped from an available index: claim it if its state says available, or names no
-- state (the claim rewrites the field); a state field naming another state moves
-- the job to that state's index instead. No hash: a deleted job.
local function claimable(key, id, queue)
  local state = redis.call('HGET', key, 'state')
  if state == 'available' then return true end
  if not state then return redis.call('EXISTS', key) == 1 end
  if not KNOWN[state] then return true end
  redis.call('HDEL', key, 'rank')
  index_job(id, queue, state, load(id))
  return false
end

-- HINCRBY, or 1 when the stored value is not a whole number or outside 0..top - 1:
-- a claim always hands out a readable attempt and lease token (the bounds are the
-- SQL backends' ones, see their claim_jobs).
local function bump(key, field, top)
  local reply = redis.pcall('HINCRBY', key, field, 1)
  if type(reply) ~= 'number' or reply < 1 or reply > top then
    redis.call('HSET', key, field, 1)
  end
end

-- Claim the job of an available-index member taken out of its index; true if claimed.
-- `reached`: the largest fairness vtime claimed, by queue (conveyor.rules.fairness).
local reached = {}
local function claim_member(queue, member)
  local id = rank_id(member)
  local key = job_key(id)
  redis.call('ZREM', waiting_key(queue), id)  -- index_job puts a waiting job back
  if not claimable(key, id, queue) then return false end
  bump(key, 'attempt', 1000000000)
  bump(key, 'lease_token', 4611686018427387904)
  -- The fields a claim owns are written whatever they held; queue too, from the
  -- index the job was popped from, so that every later script finds its indexes.
  redis.call('HSET', key, 'state', 'running', 'queue', queue,
    'lease_expires_at', lease_expires_at, 'worker_id', worker_id, 'started_at', now_text)
  redis.call('HDEL', key, 'rank')
  redis.call('ZADD', state_key(queue, 'running'), lease_expires_at, id)
  claimed[#claimed + 1] = job_reply(id)
  reached[queue] = math.max(reached[queue] or 0, member_vtime(member) or 0)
  return true
end

-- The declared buckets, refilled to now: conveyor.rules.rate_limits.refill (a bucket never
-- stored starts full; a stored value that is not a number counts as none).
local now = tonumber(now_text)
local buckets, bucket_names = {}, {}
for b = 8, first_queue - 1, 3 do
  local name, rate, burst = ARGV[b], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local stored = redis.call('HMGET', bucket_key(name), 'tokens', 'updated_at')
  local tokens, at = as_number(stored[1], nil), as_number(stored[2], nil)
  -- The bucket's time never goes back (a claimer that read the clock earlier may run
  -- later): ClaimBuckets.as_of.
  local as_of = now_text
  if tokens and at then
    tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
    if at > now then as_of = stored[2] end
  else
    tokens = burst
  end
  buckets[name] = { rate = rate, rate_text = ARGV[b + 1], burst = burst, tokens = tokens,
    as_of = as_of }
  bucket_names[#bucket_names + 1] = name
end
-- The whole tokens of a bucket (ClaimBuckets.allowed, with its slack).
local function whole_tokens(name) return math.max(0, math.floor(buckets[name].tokens + 1e-6)) end

-- With rate limits: the first `want` of the queue's free lane and of each bucket's
-- lane (as far as its tokens go), merged in claim order (score, then member), each
-- taken out of its index and claimed; a bucket is spent for each job claimed.
local function take_lanes(queue, want)
  local lanes = {}
  local function read(key, n, name)
    if n <= 0 then return end
    local page = redis.call('ZRANGE', key, 0, n - 1, 'WITHSCORES')
    for p = 1, #page, 2 do lanes[#lanes + 1] = { tonumber(page[p + 1]), page[p], key, name } end
  end
  read(state_key(queue, 'available'), want, nil)
  for _, name in ipairs(bucket_names) do
    read(lane_key(queue, name), math.min(want, whole_tokens(name)), name)
  end
  table.sort(lanes, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  local got = 0
  for i = 1, math.min(want, #lanes) do
    local lane = lanes[i]
    redis.call('ZREM', lane[3], lane[2])
    if claim_member(queue, lane[2]) then
      got = got + 1
      if lane[4] then
        local spent = buckets[lane[4]]
        spent.tokens, spent.spent = math.max(0, spent.tokens - 1), true
      end
    end
  end
  return got
end

-- Claim up to `want` jobs from one queue; returns how many it got.
local function take(queue, want)
  if want <= 0 or redis.call('HGET', PAUSED, queue) == '1' then return 0 end
  local got = 0
  if n_limits > 0 then
    got = take_lanes(queue, want)
  else
    local popped = redis.call('ZPOPMIN', state_key(queue, 'available'), want)
    for p = 1, #popped, 2 do
      if claim_member(queue, popped[p]) then got = got + 1 end
    end
  end
  local top = reached[queue]
  if top and top > 0 then advance_vtime(queue, top) end
  woken[queue] = nil
  -- Work left behind: wake the next idle worker (a chain of wake-ups, no herd).
  if #claimed >= limit and redis.call('ZCARD', state_key(queue, 'available')) > 0 then
    wake(queue)
  end
  return got
end

local more = {}  -- queues that may take spare capacity, with the room they have left
for q = first_queue, #ARGV, 3 do
  local queue, quota, ceiling = ARGV[q], tonumber(ARGV[q + 1]), tonumber(ARGV[q + 2])
  local room = ceiling < 0 and limit or ceiling
  local want = math.min(quota, limit - #claimed, room)
  if want > 0 then
    local got = take(queue, want)
    if got == want then more[#more + 1] = {queue, room - got} end
  elseif quota <= 0 then
    more[#more + 1] = {queue, room}  -- asked nothing yet: may take spare capacity
  end
end
for _, entry in ipairs(more) do
  if #claimed >= limit then break end
  take(entry[1], math.min(limit - #claimed, entry[2]))
end
for queue in pairs(woken) do wake(queue) end
if n_limits == 0 then return claimed end

-- The buckets spent, stored back; when the next token is due for a bucket that holds
-- back a waiting job of these queues.
local next_at = nil
for _, name in ipairs(bucket_names) do
  local b = buckets[name]
  -- Only a bucket this claim spent: refilling an unspent one from its stored state
  -- later gives the same tokens (ClaimBuckets.stored).
  if b.spent then
    redis.call('HSET', bucket_key(name), 'tokens', string.format('%.17g', b.tokens),
      'updated_at', b.as_of, 'rate', b.rate_text, 'burst', b.burst)
  end
  if b.tokens + 1e-6 < 1 then
    for q = first_queue, #ARGV, 3 do
      if redis.call('HGET', PAUSED, ARGV[q]) ~= '1'
          and redis.call('ZCARD', lane_key(ARGV[q], name)) > 0 then
        local at = tonumber(b.as_of) + (1 - b.tokens) / b.rate  -- the bucket's time
        if next_at == nil or at < next_at then next_at = at end
        break
      end
    end
  end
end
claimed[#claimed + 1] = next_at and string.format('%.17g', next_at) or ''
return claimed
