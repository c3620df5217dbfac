-- rescue.lua: jobs whose lease expired (their worker died or stalled) go back to
-- available (running -> available), or to the dead-letter queue (running -> dead)
-- when that was their last attempt: a crash counts as an attempt, so a job that
-- kills its worker every time ends dead. A LeaseExpired error is recorded, with the
-- same fields as the SQLite backend's rescue.
--
-- KEYS[1] <prefix>queues  every queue name (their running indexes are scanned)
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] conveyor version (recorded in the error)
-- ARGV[4] limit: most jobs rescued in this call
-- ARGV[5] max_dead: most dead jobs kept per queue (<= 0: no bound)
-- Returns the rescued ids.

local now_text, version = ARGV[2], ARGV[3]
local limit, max_dead = tonumber(ARGV[4]), tonumber(ARGV[5])
local rescued = {}
for _, queue in ipairs(redis.call('SMEMBERS', QUEUES)) do
  local want = limit - #rescued
  if want <= 0 then break end
  local expired = redis.call('ZRANGEBYSCORE', state_key(queue, 'running'), '-inf',
    '(' .. now_text, 'LIMIT', 0, want)
  for _, id in ipairs(expired) do
    local f = load(id)
    if not f or f.state ~= 'running' then
      redis.call('ZREM', state_key(queue, 'running'), id)  -- stale index entry
    elseif f.lease_expires_at and tonumber(f.lease_expires_at) < tonumber(now_text) then
      local dead = tonumber(f.attempt) >= tonumber(f.max_attempts)
      local new_state = dead and 'dead' or 'available'
      if allowed(f.state, new_state) then
        local key = job_key(id)
        local worker_id = f.worker_id or ''
        local shown = f.worker_id or '?'
        -- worker ids are host:pid:nonce
        local host = ''
        local colon = string.find(worker_id, ':', 1, true)
        if colon then host = string.sub(worker_id, 1, colon - 1) end
        append_error(id, f.errors, '{"attempt":' .. f.attempt .. ',"at":' .. now_text
          .. ',"type":"LeaseExpired","message":'
          .. cjson.encode('lease expired: worker ' .. shown .. ' stopped heartbeating')
          .. ',"traceback":"","worker_id":' .. cjson.encode(worker_id)
          .. ',"host":' .. cjson.encode(host) .. ',"version":' .. cjson.encode(version) .. '}')
        unindex_job(id, f)
        redis.call('HSET', key, 'state', new_state)
        redis.call('HDEL', key, 'lease_expires_at')
        if dead then
          redis.call('HSET', key, 'finished_at', now_text)
          f.finished_at = now_text
        else
          redis.call('HDEL', key, 'finished_at')
        end
        index_job(id, queue, new_state, f)
        if dead then trim_finished(queue, 'dead', max_dead) else wake(queue) end
        rescued[#rescued + 1] = id
      end
    end
  end
end
return rescued
