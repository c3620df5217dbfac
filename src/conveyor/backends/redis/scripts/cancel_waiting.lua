-- cancel_waiting.lua: an operator cancels waiting jobs in bulk (queue purge):
-- scheduled|available|retryable -> cancelled. A job claimed since the caller chose it
-- is left running: this script never flags one (cancel.lua does that, for one job).
-- A workflow member's dependants follow it (release_dependants).
--
-- KEYS[1] <prefix>due
-- ARGV[1] key prefix
-- ARGV[2] now (finished_at)
-- ARGV[3] max_completed: most cancelled jobs kept per queue (<= 0: no bound)
-- ARGV[4] Conveyor's version (the error record of a dependant cancelled onwards)
-- ARGV[5..] ids
-- Returns the ids cancelled.

local now_text = ARGV[2]
local cancelled, queues = {}, {}
for a = 5, #ARGV do
  local id = ARGV[a]
  local f = load(id)
  if f and WAITING[f.state] and allowed(f.state, 'cancelled') then
    unindex_job(id, f)
    redis.call('HSET', job_key(id), 'state', 'cancelled', 'finished_at', now_text)
    f.finished_at = now_text
    index_job(id, f.queue, 'cancelled', f)
    signal_end(id)
    if f.dependants then release_dependants(id, 'cancelled', f, now_text, ARGV[4]) end
    queues[f.queue] = true
    cancelled[#cancelled + 1] = id
  end
end
for queue in pairs(queues) do trim_finished(queue, 'cancelled', tonumber(ARGV[3])) end
return cancelled
