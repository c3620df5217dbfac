-- complete.lua: N attempts succeeded (running -> completed), fenced by lease token.
--
-- KEYS[1] <prefix>unique  (touched when count retention drops old jobs)
-- ARGV[1] key prefix
-- ARGV[2] now (finished_at)
-- ARGV[3] max_completed: most completed jobs kept per queue (<= 0: no bound)
-- ARGV[4] Conveyor's version (the error record of a dependant cancelled onwards)
-- ARGV[5..] quadruples: id, lease token, result? ('' or '~' .. JSON text), when the
--          result expires ('' for never: no result_ttl; conveyor.rules.results)
-- A job with dependants releases them (release_dependants), in this same script.
-- Returns {id, code} pairs for the jobs not changed: code "stale" (not running or
-- another token) or "illegal".

local now_text, max_completed, version = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local rejected = {}
for a = 5, #ARGV, 4 do
  local id = ARGV[a]
  local f = load(id)
  if not holds_lease(f, ARGV[a + 1]) then
    rejected[#rejected + 1] = { id, E_STALE }
  elseif not allowed(f.state, 'completed') then
    rejected[#rejected + 1] = { id, E_ILLEGAL }
  else
    local key = job_key(id)
    unindex_job(id, f)
    redis.call('HSET', key, 'state', 'completed', 'finished_at', now_text)
    local result = optional(ARGV[a + 2])
    if result then
      redis.call('HSET', key, 'result', result)
      redis.call('HDEL', key, 'lease_expires_at')
      local expires = ARGV[a + 3]
      if expires ~= '' then
        redis.call('HSET', key, 'result_expires_at', expires)
        redis.call('ZADD', RESULT_EXPIRIES, expires, id)
      end
    else
      redis.call('HDEL', key, 'lease_expires_at', 'result')
    end
    f.finished_at = now_text
    index_job(id, f.queue, 'completed', f)
    signal_end(id)
    if f.dependants then release_dependants(id, 'completed', f, now_text, version) end
    trim_finished(f.queue, 'completed', max_completed)
  end
end
return rejected
