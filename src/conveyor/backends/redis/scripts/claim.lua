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
-- ARGV[7..] triples: queue name, quota (most jobs from it in the first pass),
--           ceiling (most from it over both passes; -1: no bound)
-- Returns the claimed jobs, each as HGETALL, in claim order.

local now_text, lease_expires_at, worker_id = ARGV[2], ARGV[3], ARGV[4]
local limit, stage_limit = tonumber(ARGV[5]), tonumber(ARGV[6])

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

-- Claim up to `want` jobs from one queue; returns how many it got.
local function take(queue, want)
  if want <= 0 or redis.call('HGET', PAUSED, queue) == '1' then return 0 end
  local got, reached = 0, nil
  local popped = redis.call('ZPOPMIN', state_key(queue, 'available'), want)
  for p = 1, #popped, 2 do
    local id = rank_id(popped[p])
    local key = job_key(id)
    redis.call('ZREM', waiting_key(queue), id)  -- index_job puts a waiting job back
    if claimable(key, id, queue) then
      bump(key, 'attempt', 1000000000)
      bump(key, 'lease_token', 4611686018427387904)
      -- The fields a claim owns are written whatever they held; queue too, from the
      -- index the job was popped from, so that every later script finds its indexes.
      redis.call('HSET', key, 'state', 'running', 'queue', queue,
        'lease_expires_at', lease_expires_at, 'worker_id', worker_id, 'started_at', now_text)
      redis.call('HDEL', key, 'rank')
      redis.call('ZADD', state_key(queue, 'running'), lease_expires_at, id)
      claimed[#claimed + 1] = job_reply(id)
      got = got + 1
      reached = math.max(reached or 0, member_vtime(popped[p]) or 0)
    end
  end
  if reached and reached > 0 then advance_vtime(queue, reached) end
  woken[queue] = nil
  -- Work left behind: wake the next idle worker (a chain of wake-ups, no herd).
  if #claimed >= limit and redis.call('ZCARD', state_key(queue, 'available')) > 0 then
    wake(queue)
  end
  return got
end

local more = {}  -- queues that may take spare capacity, with the room they have left
for q = 7, #ARGV, 3 do
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
return claimed
