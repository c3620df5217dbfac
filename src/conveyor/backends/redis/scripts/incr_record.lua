-- incr_record.lua: add to an integer shared record. A live record keeps its expiry
-- (a fixed window); an absent or expired one starts at `amount` with the new expiry.
--
-- KEYS[1] <prefix>meta:<namespace>          hash: key -> value
-- KEYS[2] <prefix>meta:<namespace>:expires  zset: key by expiry time
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] key
-- ARGV[4] amount (an integer)
-- ARGV[5] expires_at for a new record ('' for no expiry)
-- Returns the new value, or the error CONVEYOR_NOT_AN_INTEGER.

local now, key, amount = ARGV[2], ARGV[3], tonumber(ARGV[4])
local current = live_record(KEYS[1], KEYS[2], key, now)
if current == nil then
  put_record(KEYS[1], KEYS[2], key, ARGV[4], ARGV[5])
  return amount
end
if not string.match(current, '^%-?%d+$') then
  return redis.error_reply('CONVEYOR_NOT_AN_INTEGER ' .. string.sub(current, 1, 40))
end
local value = tonumber(current) + amount
redis.call('HSET', KEYS[1], key, string.format('%d', value))
return value
