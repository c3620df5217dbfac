-- enqueue_bounded.lua: enqueue.lua for a batch with jobs of bounded queues
-- (conveyor.rules.backpressure). A job whose queue holds max_waiting waiting jobs is
-- refused, or, with a shed_error, stored while the queue's oldest waiting jobs are
-- cancelled (shed_oldest of _lib.lua), each keeping the shed_error in its history.
-- Every check and write of the batch is in this one script: producers racing for
-- the last room cannot both get it.
--
-- KEYS[1] <prefix>seq, KEYS[2] <prefix>due, KEYS[3] <prefix>unique,
-- KEYS[4] <prefix>queues, KEYS[5] <prefix>jobs: as in enqueue.lua
-- ARGV[1] key prefix
-- ARGV[2] now
-- ARGV[3..] 21 arguments per job, as in enqueue.lua; max_waiting and shed_error are set for the jobs of bounded queues
-- Returns what enqueue.lua returns, 'full:<depth>' for each refused job.

return enqueue_batch(shed_oldest)
