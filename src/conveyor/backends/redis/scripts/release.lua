-- release.lua: N jobs go back to waiting without using their attempt: a snooze
-- (running -> scheduled, or available for no delay) or a cold shutdown's release
-- (running -> available). attempt is decremented (the claim had counted it).
--
-- KEYS[1] <prefix>due     scheduled jobs by run_at
-- ARGV[1] key prefix
-- ARGV[2..] groups of 4: id, lease token, new state (scheduled|available), run_at?
-- Returns {id, code} pairs for the jobs not changed ("stale" or "illegal").

local rejected = {}
for a = 2, #ARGV, 4 do
  local id, new_state = ARGV[a], ARGV[a + 2]
  local f = load(id)
  if not holds_lease(f, ARGV[a + 1]) then
    rejected[#rejected + 1] = { id, E_STALE }
  elseif (new_state ~= 'scheduled' and new_state ~= 'available')
      or not allowed(f.state, new_state) then
    rejected[#rejected + 1] = { id, E_ILLEGAL }
  else
    local key = job_key(id)
    unindex_job(id, f)
    local run_at = optional(ARGV[a + 3])
    if run_at then f.run_at = run_at end
    f.run_at = f.run_at or '0'  -- a job that lost its run_at is due at once
    -- An attempt count that is not a whole number (corrupted while running) restarts.
    local reply = redis.pcall('HINCRBY', key, 'attempt', -1)
    if type(reply) ~= 'number' or reply < 0 then redis.call('HSET', key, 'attempt', 0) end
    redis.call('HSET', key, 'state', new_state, 'run_at', f.run_at)
    redis.call('HDEL', key, 'lease_expires_at')
    index_job(id, f.queue, new_state, f)
    if new_state == 'available' then wake(f.queue) end
  end
end
return rejected
