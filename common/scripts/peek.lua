-- peek.lua — read the head of a ready queue with what routing needs (read-only).
--
-- KEYS[1] ready:{group}
-- ARGV[1] how many
-- Returns a flat list of (task id, previous worker, routing strategy, routing key) in queue order.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', K.task(id), 'prev_worker', 'routing', 'route')
  push(out, id, v[1] or '', v[2] or '', v[3] or '')
end
return out
