-- expire_results.lua: clear the results past their expiry (result_ttl,
-- conveyor.rules.results), taken from the sorted set of expiries, so no completed job
-- without a TTL is ever looked at. The job and its result_expires_at stay.
--
-- KEYS[1] <prefix>result_expiries
-- ARGV[1] key prefix
-- ARGV[2] now: results expiring at or before it are cleared
-- ARGV[3] limit: entries taken from the set
-- Returns {entries taken, id cleared, ...}: an entry whose job is gone (deleted,
-- trimmed) or holds no result is taken without clearing anything.

local due = redis.call('ZRANGEBYSCORE', RESULT_EXPIRIES, '-inf', ARGV[2],
                       'LIMIT', 0, tonumber(ARGV[3]))
local out = { #due }
for _, id in ipairs(due) do
  redis.call('ZREM', RESULT_EXPIRIES, id)
  local key = job_key(id)
  if redis.call('HEXISTS', key, 'result') == 1
      and redis.call('HEXISTS', key, 'result_expires_at') == 1 then
    redis.call('HDEL', key, 'result')
    out[#out + 1] = id
  end
end
return out
