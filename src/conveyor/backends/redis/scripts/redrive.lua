-- redrive.lua: an operator sends dead or cancelled jobs back to work
-- (dead|cancelled -> available) with fresh attempts; their error history stays. A
-- workflow member's dependants that it had cancelled wait for it again
-- (resume_dependants).
--
-- KEYS[1] <prefix>unique  unique_key -> id (a redriven job holds its key again)
-- ARGV[1] key prefix
-- ARGV[2] now (the new run_at)
-- ARGV[3..] ids, oldest failure first (chosen by the caller)
-- Returns the jobs as they are now (HGETALL each; jobs no longer there are left out).

local now_text = ARGV[2]
local out = {}
for a = 3, #ARGV do
  local id = ARGV[a]
  local f = load(id)
  if f then
    if (f.state == 'dead' or f.state == 'cancelled') and allowed(f.state, 'available') then
      local key = job_key(id)
      unindex_job(id, f)
      redis.call('HSET', key, 'state', 'available', 'attempt', 0, 'run_at', now_text,
        'cancel_requested', 0)
      redis.call('HDEL', key, 'finished_at')
      f.run_at = now_text
      index_job(id, f.queue, 'available', f)
      wake(f.queue)
      if f.dependants then resume_dependants(f) end
      -- Live again: dedup by its unique_key must find it, unless a live job holds the key.
      if f.unique_key then
        local holder = redis.call('HGET', UNIQUE, f.unique_key)
        local held = holder and load(holder)
        if not held or not is_live(held, tonumber(now_text)) then
          redis.call('HSET', UNIQUE, f.unique_key, id)
        end
      end
    end
    out[#out + 1] = job_reply(id)
  end
end
return out
