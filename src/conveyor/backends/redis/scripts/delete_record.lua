-- delete_record.lua: delete one shared record.
--
-- KEYS[1] <prefix>meta:<namespace>          hash: key -> value
-- KEYS[2] <prefix>meta:<namespace>:expires  zset: key by expiry time
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] key
-- Returns 1 if a live record was there, else 0.

local live = live_record(KEYS[1], KEYS[2], ARGV[3], ARGV[2]) ~= nil
redis.call('HDEL', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[3])
return live and 1 or 0
