-- tasks.lua — read tasks whole: each one's hash and its attempts' (read-only).
--
-- ARGV the task ids
-- Returns, for each task id in order, two flat lists of fields and values: its hash (empty: no such task),
-- then its attempts' hash.
--
-- One call where a pipeline took two HGETALLs a task: redis-py parses and converts each reply of a pipeline
-- in Python, a nested reply is parsed at once (a 2,000-task run read for `submit --wait --json`: ~35 against
-- ~125 ms of the master's CPU). Callers send at most 200 ids a call (master/redis_reads.py): Redis runs
-- nothing else meanwhile.
local out = {}
for i, id in ipairs(ARGV) do
  out[2 * i - 1] = redis.call('HGETALL', K.task(id))
  out[2 * i] = redis.call('HGETALL', K.attempts(id))
end
return out
