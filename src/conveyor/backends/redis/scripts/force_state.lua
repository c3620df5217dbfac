-- force_state.lua: test hook for the conformance suite. Writes a raw state change
-- so the suite can show that storage refuses transitions missing from
-- conveyor.model.lifecycle.ALLOWED (the SQLite backend has a trigger for the same).
--
-- KEYS[1] <prefix>queues  (only to route the call: all keys share one slot)
-- ARGV[1] key prefix
-- ARGV[2] id
-- ARGV[3] new state
-- Returns 1 when changed, 0 when the job is unknown or already in that state;
-- an error "CONVEYOR_ILLEGAL_TRANSITION old>new" for an illegal transition.

local id, new_state = ARGV[2], ARGV[3]
local f = load(id)
if not f or f.state == new_state then return 0 end
if not allowed(f.state, new_state) then
  return redis.error_reply('CONVEYOR_ILLEGAL_TRANSITION ' .. f.state .. '>' .. new_state)
end
unindex_job(id, f)
redis.call('HSET', job_key(id), 'state', new_state)
index_job(id, f.queue, new_state, f)
return 1
