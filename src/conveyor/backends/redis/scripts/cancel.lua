-- cancel.lua: an operator cancels a job. A waiting one is cancelled at once
-- (scheduled|available|retryable -> cancelled), as is a workflow member blocked on its
-- parents, and its dependants follow (release_dependants); a running one is only flagged
-- (cancel_requested = 1): its handler sees the flag at the next heartbeat and the
-- worker settles it cancelled if the handler agrees.
--
-- KEYS[1] <prefix>due
-- ARGV[1] key prefix
-- ARGV[2] now (finished_at)
-- ARGV[3] id
-- ARGV[4] max_completed: most cancelled jobs kept per queue (<= 0: no bound)
-- ARGV[5] Conveyor's version (the error record of a dependant cancelled onwards)
-- Returns the job as it is now (HGETALL), or nil when unknown.

local now_text, id = ARGV[2], ARGV[3]
local f = load(id)
if not f then return nil end
local key = job_key(id)
if (WAITING[f.state] or f.state == 'blocked') and allowed(f.state, 'cancelled') then
  unindex_job(id, f)
  redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now_text)
  f.finished_at = now_text
  index_job(id, f.queue, 'cancelled', f)
  signal_end(id)
  if f.dependants then release_dependants(id, 'cancelled', f, now_text, ARGV[5]) end
  local result = job_reply(id)
  trim_finished(f.queue, 'cancelled', tonumber(ARGV[4]))
  return result
elseif f.state == 'running' then
  redis.call('HSET', key, 'cancel_requested', '1')
end
return job_reply(id)
