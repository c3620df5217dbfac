-- heartbeat.lua: extend the leases of N running jobs (state stays running),
-- fenced by lease token.
--
-- KEYS[1] <prefix>queues  (only to route the call: all keys share one slot)
-- ARGV[1] key prefix
-- ARGV[2] new lease_expires_at (now + lease seconds)
-- ARGV[3..] pairs: id, lease token
-- Returns {lost ids, ids whose cancel was requested}.

local lease_expires_at = ARGV[2]
local lost, cancel = {}, {}
for a = 3, #ARGV, 2 do
  local id = ARGV[a]
  local key = job_key(id)
  local v = redis.call('HMGET', key, 'state', 'lease_token', 'queue', 'cancel_requested')
  if v[1] ~= 'running' or v[2] ~= ARGV[a + 1] then
    lost[#lost + 1] = id
  else
    redis.call('HSET', key, 'lease_expires_at', lease_expires_at)
    redis.call('ZADD', state_key(v[3], 'running'), lease_expires_at, id)
    if v[4] == '1' then cancel[#cancel + 1] = id end
  end
end
return { lost, cancel }
