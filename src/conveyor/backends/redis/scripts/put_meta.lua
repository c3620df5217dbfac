-- put_meta.lua: store one small shared record (not a job: no state change), and
-- drop the namespace's records whose TTL ran out, so the hash stays small.
--
-- KEYS[1] <prefix>meta:<namespace>          hash: key -> JSON text
-- KEYS[2] <prefix>meta:<namespace>:expires  zset: key by expiry time
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] key
-- ARGV[4] value (JSON text)
-- ARGV[5] expires_at ('' for no expiry)
-- Returns 1.

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
for _, key in ipairs(expired) do redis.call('HDEL', KEYS[1], key) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
if ARGV[5] == '' then
  redis.call('ZREM', KEYS[2], ARGV[3])
else
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
end
return 1
