-- index_waiting.lua: layout 2 (conveyor.rules.backpressure): fill each queue's waiting index
-- ({p}:q:<queue>:waiting, every scheduled, available and retryable job by seq) from
-- the state indexes, for a prefix written before it existed. Safe to repeat (ZADD).
--
-- KEYS[1] <prefix>queues  set of every queue name seen
-- ARGV[1] key prefix
-- Returns the number of jobs indexed.

local indexed = 0
for _, queue in ipairs(redis.call('SMEMBERS', QUEUES)) do
  for state in pairs(WAITING) do
    for _, member in ipairs(redis.call('ZRANGE', state_key(queue, state), 0, -1)) do
      local id = state == 'available' and rank_id(member) or member
      local seq = redis.call('HGET', job_key(id), 'seq')
      if seq then
        redis.call('ZADD', waiting_key(queue), as_number(seq, 0), id)
        indexed = indexed + 1
      end
    end
  end
end
return indexed
