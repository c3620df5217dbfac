-- put_record.lua: store one shared record (not a job: no state change), and drop
-- the namespace's records whose TTL ran out, so the hash stays small.
--
-- KEYS[1] <prefix>meta:<namespace>          hash: key -> value
-- KEYS[2] <prefix>meta:<namespace>:expires  zset: key by expiry time
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] key
-- ARGV[4] value
-- ARGV[5] expires_at ('' for no expiry)
-- Returns 1.

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
for _, key in ipairs(expired) do redis.call('HDEL', KEYS[1], key) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
put_record(KEYS[1], KEYS[2], ARGV[3], ARGV[4], ARGV[5])
return 1
