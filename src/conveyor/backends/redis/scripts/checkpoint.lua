-- checkpoint.lua: store a running job's checkpoint and/or progress (JSON text),
-- fenced by lease token. No state change.
--
-- KEYS[1] <prefix>queues  (only to route the call: all keys share one slot)
-- ARGV[1] key prefix
-- ARGV[2] id
-- ARGV[3] lease token
-- ARGV[4] checkpoint? ('' keeps the stored one)
-- ARGV[5] progress? ('' keeps the stored one)
-- Returns 1 when stored, 0 when the lease is lost.

local key = job_key(ARGV[2])
local v = redis.call('HMGET', key, 'state', 'lease_token')
if v[1] ~= 'running' or v[2] ~= ARGV[3] then return 0 end
local checkpoint, progress = optional(ARGV[4]), optional(ARGV[5])
if checkpoint then redis.call('HSET', key, 'checkpoint', checkpoint) end
if progress then redis.call('HSET', key, 'progress', progress) end
return 1
