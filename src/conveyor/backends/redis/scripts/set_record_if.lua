-- set_record_if.lua: compare and set one shared record: store `value` only if the
-- record is now `expected` (absent, or expired, when `expected` is '').
--
-- KEYS[1] <prefix>meta:<namespace>          hash: key -> value
-- KEYS[2] <prefix>meta:<namespace>:expires  zset: key by expiry time
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] key
-- ARGV[4] expected: '' (absent) or '~' .. the expected value
-- ARGV[5] value
-- ARGV[6] expires_at ('' for no expiry)
-- Returns 1 if stored, 0 if not.

local now, key = ARGV[2], ARGV[3]
local current = live_record(KEYS[1], KEYS[2], key, now)
local expected = optional(ARGV[4])
if current ~= expected then return 0 end
put_record(KEYS[1], KEYS[2], key, ARGV[5], ARGV[6])
return 1
