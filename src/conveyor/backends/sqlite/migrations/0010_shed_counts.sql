-- Backpressure (docs/flow-control.md): how many waiting jobs each queue shed to admit
-- newer ones, ever. The enqueue that sheds them adds to it in its own transaction, so
-- the count is exact and a scrape reads one row a queue instead of counting the shed
-- jobs still stored (which pruning removes).
ALTER TABLE conveyor_queues ADD COLUMN shed INTEGER NOT NULL DEFAULT 0;
