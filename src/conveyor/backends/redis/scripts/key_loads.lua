-- key_loads.lua: the concurrency keys of one page of a queue's running or parked jobs,
-- counted (flow_loads, for operators). Changes nothing. A page, not the whole index,
-- so one call blocks the server for a bounded time however long the backlog is; only
-- the counts cross the wire.
--
-- KEYS[1] <prefix>q:<queue>:running or <prefix>q:<queue>:parked (members are job ids)
-- ARGV[1] key prefix
-- ARGV[2] first rank of the page (ZRANGE start)
-- ARGV[3] page size
-- Returns {members read, key, count, key, count, ...}; fewer members read than the
-- page size: the index ended.

local start, size = tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = redis.call('ZRANGE', KEYS[1], start, start + size - 1)
local counts, order = {}, {}
for _, id in ipairs(ids) do
  local key = redis.call('HGET', job_key(id), 'concurrency_key')
  if key then
    if not counts[key] then
      counts[key] = 0
      order[#order + 1] = key
    end
    counts[key] = counts[key] + 1
  end
end
local out = {#ids}
for _, key in ipairs(order) do
  out[#out + 1] = key
  out[#out + 1] = counts[key]
end
return out
