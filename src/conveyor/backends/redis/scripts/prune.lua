-- prune.lua: age-based retention. Deletes the given jobs if they are still past
-- it: completed/cancelled finished before `completed_before` and outside their
-- unique_for dedup window, dead finished before `dead_before`. Active jobs are
-- never touched. The caller picks candidates from the finished indexes.
--
-- KEYS[1] <prefix>unique
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] completed_before
-- ARGV[4] dead_before
-- ARGV[5..] candidate ids
-- Returns how many jobs were deleted.

local now = tonumber(ARGV[2])
local completed_before, dead_before = tonumber(ARGV[3]), tonumber(ARGV[4])
local deleted = 0
for a = 5, #ARGV do
  local id = ARGV[a]
  local f = load(id)
  if f and f.finished_at then
    -- A finish time that is not a number counts as old: the caller chose these ids by
    -- their index score, which is the finish time the job had when it was indexed.
    local finished_at = as_number(f.finished_at, 0)
    local unique_for = as_number(f.unique_for, nil)
    local gone
    if f.state == 'completed' or f.state == 'cancelled' then
      gone = finished_at < completed_before
        and (unique_for == nil or finished_at + unique_for < now)
    else
      gone = f.state == 'dead' and finished_at < dead_before
    end
    if gone then
      delete_job(id, f)
      deleted = deleted + 1
    end
  end
end
return deleted
