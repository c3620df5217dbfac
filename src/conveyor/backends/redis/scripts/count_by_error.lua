-- count_by_error.lua: how many of one page of a state index's jobs have a last error
-- of one type (count_jobs with an error type: e.g. the jobs a full queue shed, whose
-- last error is QueueFull). Changes nothing. A page, not the whole index, so one call
-- holds the server for a bounded time; only the count crosses the wire.
--
-- KEYS[1] <prefix>q:<queue>:<state>, a state whose index members are job ids (not
--         available: its members are claim ranks)
-- ARGV[1] key prefix
-- ARGV[2] first rank of the page (ZRANGE start)
-- ARGV[3] page size
-- ARGV[4] the error type, ASCII-lowered (as the other backends compare it)
-- Returns {members read, matches}; fewer members read than the page size: the index ended.

local start, size, wanted = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ids = redis.call('ZRANGE', KEYS[1], start, start + size - 1)
local matches = 0
for _, id in ipairs(ids) do
  local errors = redis.call('HGET', job_key(id), 'errors')
  if errors and errors ~= '' and errors ~= '[]' then
    local ok, list = pcall(cjson.decode, errors)
    local last = ok and type(list) == 'table' and list[#list] or nil
    if type(last) == 'table' and type(last.type) == 'string'
        and string.lower(last.type) == wanted then
      matches = matches + 1
    end
  end
end
return {#ids, matches}
