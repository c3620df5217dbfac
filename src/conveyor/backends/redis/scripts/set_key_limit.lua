-- set_key_limit.lua: set (or drop) a concurrency key's limit (conveyor.rules.adaptive) and
-- rebalance the key: a raised limit unparks its next jobs at once; a lowered one
-- takes no slot back.
--
-- KEYS[1] <prefix>ck:<key>:limit  string: the key's set limit
-- ARGV[1] key prefix
-- ARGV[2] concurrency key
-- ARGV[3] limit ('' drops it: the key's jobs' own limit again)
-- Returns 1.

if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[3])
end
rebalance(ARGV[2])
return 1
