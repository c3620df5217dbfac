-- fail.lua: N attempts failed: retry later (running -> retryable), dead-letter
-- (running -> dead) or honour a cancel request (running -> cancelled). The
-- attempt's error is appended to the job's history. Fenced by lease token.
--
-- KEYS[1] <prefix>due     retryable jobs by run_at
-- KEYS[2] <prefix>unique  (touched when count retention drops old jobs)
-- ARGV[1] key prefix
-- ARGV[2] now (finished_at of dead/cancelled)
-- ARGV[3] max_completed: most cancelled jobs kept per queue (<= 0: no bound)
-- ARGV[4] max_dead: most dead jobs kept per queue (<= 0: no bound)
-- ARGV[5] Conveyor's version (the error record of a dependant cancelled)
-- ARGV[6..] groups of 5: id, lease token, new state, run_at?, error? (JSON object)
-- A dead or cancelled job with dependants releases them (release_dependants) here.
-- Returns {id, code} pairs for the jobs not changed ("stale" or "illegal").

local now_text = ARGV[2]
local max_completed, max_dead, version = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local rejected = {}
for a = 6, #ARGV, 5 do
  local id, new_state = ARGV[a], ARGV[a + 2]
  local f = load(id)
  if not holds_lease(f, ARGV[a + 1]) then
    rejected[#rejected + 1] = { id, E_STALE }
  elseif new_state == 'completed' or not allowed(f.state, new_state) then
    rejected[#rejected + 1] = { id, E_ILLEGAL }
  else
    local key = job_key(id)
    unindex_job(id, f)
    local run_at = optional(ARGV[a + 3])
    if run_at then f.run_at = run_at end
    f.run_at = f.run_at or now_text  -- a job that lost its run_at gets one
    redis.call('HSET', key, 'state', new_state, 'run_at', f.run_at)
    redis.call('HDEL', key, 'lease_expires_at')
    if new_state == 'dead' or new_state == 'cancelled' then
      redis.call('HSET', key, 'finished_at', now_text)
      f.finished_at = now_text
    else
      redis.call('HDEL', key, 'finished_at')
    end
    local error_json = optional(ARGV[a + 4])
    if error_json then append_error(id, f.errors, error_json) end
    index_job(id, f.queue, new_state, f)
    if f.dependants and (new_state == 'dead' or new_state == 'cancelled') then
      release_dependants(id, new_state, f, now_text, version)
    end
    if new_state == 'dead' or new_state == 'cancelled' then signal_end(id) end
    if new_state == 'dead' then
      trim_finished(f.queue, 'dead', max_dead)
    elseif new_state == 'cancelled' then
      trim_finished(f.queue, 'cancelled', max_completed)
    elseif new_state == 'available' then
      wake(f.queue)
    end
  end
end
return rejected
