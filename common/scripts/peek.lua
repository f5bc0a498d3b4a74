-- peek.lua — read the head of a ready queue with what routing needs (read-only).
--
-- KEYS[1] ready:{group}
-- ARGV[1] how many
-- Returns a flat list of (task id, previous worker, routing strategy, routing key) in queue order.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
local routes = {}  -- run id -> {routing, route}: the tasks of a run share them
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', K.task(id), 'prev_worker', 'run_id')
  local route = routes[v[2]]
  if not route then
    route = redis.call('HMGET', K.run(v[2] or ''), 'routing', 'route')
    routes[v[2]] = route
  end
  push(out, id, v[1] or '', route[1] or '', route[2] or '')
end
return out
