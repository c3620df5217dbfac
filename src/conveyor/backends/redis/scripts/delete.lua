-- delete.lua: an operator deletes finished jobs (completed|cancelled|dead). Active
-- jobs are never deleted, even when named.
--
-- KEYS[1] <prefix>unique
-- ARGV[1] key prefix
-- ARGV[2..] ids
-- Returns the ids deleted.

local deleted = {}
for a = 2, #ARGV do
  local id = ARGV[a]
  local f = load(id)
  if f and FINISHED[f.state] then
    delete_job(id, f)
    deleted[#deleted + 1] = id
  end
end
return deleted
