-- enqueue_dependants.lua: enqueue.lua for a batch with jobs that depend on others
-- (workflows, conveyor.rules.dependencies). Parents come before their dependants in the
-- batch; the whole batch is one script, so a workflow is stored whole or not at all.
--
-- KEYS[1] <prefix>seq, KEYS[2] <prefix>due, KEYS[3] <prefix>unique,
-- KEYS[4] <prefix>queues, KEYS[5] <prefix>jobs: as in enqueue.lua
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3] JSON: {"v": Conveyor's version, "jobs": {"<job id>": {"p": [parent ids],
--         "a": allow_failure}, ...}} for each job of the batch that has parents
-- ARGV[4..] 21 arguments per job, as in enqueue.lua (no bound for the dependants:
--         a blocked job takes no room in a bounded queue)
-- Returns what enqueue.lua returns; an error CONVEYOR_UNKNOWN_PARENT <id> <parent>
-- when a parent is neither stored nor earlier in the batch (nothing written).

local given = cjson.decode(ARGV[3])
local refused = check_parents(given.jobs, 4)
if refused then return refused end
return enqueue_batch(shed_oldest, given.jobs, given.v)
