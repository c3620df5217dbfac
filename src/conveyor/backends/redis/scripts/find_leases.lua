-- find_leases.lua: running jobs whose lease expired before a time, or held by
-- workers known to be dead. Changes nothing: the rescuer settles what it finds
-- through fail.lua, fenced by each job's lease token.
--
-- KEYS[1] <prefix>queues  every queue name (their running indexes are read)
-- ARGV[1] key prefix
-- ARGV[2] expired_before ('' for none)
-- ARGV[3] limit: most leases returned
-- ARGV[4..] worker ids (none, or the dead workers)
-- Returns groups of 6: id, lease_token, worker_id ('' for none), attempt,
-- max_attempts, lease_expires_at.

local expired_before, limit = ARGV[2], tonumber(ARGV[3])
local dead = {}
for a = 4, #ARGV do dead[ARGV[a]] = true end
local by_worker = #ARGV >= 4
local found, count = {}, 0

-- Numbers as whole-number text (a stored value that is not one reads as 0, as the
-- fence in holds_lease reads it), so one corrupt job never fails the reply.
local function add(id, f)
  found[#found + 1] = id
  found[#found + 1] = whole_text(f.lease_token, '0')
  found[#found + 1] = f.worker_id or ''
  found[#found + 1] = whole_text(f.attempt, '0')
  found[#found + 1] = whole_text(f.max_attempts, '0')
  local expires = as_number(f.lease_expires_at, nil)
  found[#found + 1] = expires and string.format('%.17g', expires) or ''
  count = count + 1
end

for _, queue in ipairs(redis.call('SMEMBERS', QUEUES)) do
  if count >= limit then break end
  local running = state_key(queue, 'running')
  -- Scored by lease expiry: expired leases are a range; a dead worker's are anywhere.
  local ids
  if by_worker then
    ids = redis.call('ZRANGE', running, 0, -1)
  else
    ids = redis.call('ZRANGEBYSCORE', running, '-inf', '(' .. expired_before, 'LIMIT', 0,
      limit - count)
  end
  for _, id in ipairs(ids) do
    if count >= limit then break end
    local f = load(id)
    if f and f.state == 'running' then
      -- The index scored it by its lease expiry; a stored expiry that is not a
      -- number counts as expired (the score put it in the range).
      local expired = expired_before ~= ''
        and as_number(f.lease_expires_at, 0) < tonumber(expired_before)
      if expired or (f.worker_id and dead[f.worker_id]) then add(id, f) end
    end
  end
end
return found
