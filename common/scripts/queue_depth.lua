-- queue_depth.lua — how many tasks wait in each group's ready queue, by priority (read-only; /metrics).
--
-- KEYS[1] groups
-- ARGV[1] most queued tasks read in all (larger queues are counted, not split by priority)
-- ARGV[2] the priority aging step in ms (master/store.py ready_score)
-- Returns, per group, a flat group of: group, length, split (1: counted by priority, 0: too long), pairs,
-- then that many (priority, count) pairs.
--
-- A queue does not say a task's priority: its score is the time its run was queued (fired_ms) minus
-- priority × aging step (so a waiting task ages), which this undoes with the run's fired_ms. Reading every
-- queued task is O(n), so only queues within ARGV[1] tasks in all are split; the others report their length.
local left, aging = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local groups = redis.call('SMEMBERS', KEYS[1])
table.sort(groups)
for _, group in ipairs(groups) do
  local queue = K.ready(group)
  local n = redis.call('ZCARD', queue)
  local counts, keys = {}, {}
  local split = n <= left
  if split and n > 0 then
    left = left - n
    local queued = {}  -- run id → when it was queued, ms (a run's tasks share it)
    local entries = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      local run_id = redis.call('HGET', K.task(entries[i]), 'run_id')
      if run_id then
        if not queued[run_id] then
          queued[run_id] = tonumber(redis.call('HGET', K.run(run_id), 'fired_ms') or '0')
        end
        local priority = math.floor((queued[run_id] - tonumber(entries[i + 1])) / aging + 0.5)
        if not counts[priority] then table.insert(keys, priority) end
        counts[priority] = (counts[priority] or 0) + 1
      end
    end
  end
  table.sort(keys)
  push(out, group, n, split and 1 or 0, #keys)
  for _, p in ipairs(keys) do push(out, p, counts[p]) end
end
return out
