-- renew.lua — extend the leases a worker still holds (its heartbeat).
--
-- KEYS[1] leases
-- ARGV[1] worker id   ARGV[2] lease ms   ARGV[3..] pairs: task id, fencing token
-- Returns {renewed, lost, deadline}: renewed and lost are flat lists of (task id, token) pairs.
-- A lease is renewed only if the task is LEASED to this worker under this very token; anything else
-- (cancelled, requeued after expiry, re-leased elsewhere) is lost and the worker must kill the task.
--
-- Invariant: a lease only ever moves forward for the attempt that holds it; a stale worker can never
-- extend (or revive) a lease.
local now = now_ms()
local deadline = now + tonumber(ARGV[2])
local renewed, lost = {}, {}
for i = 3, #ARGV, 2 do
  local task_id, token = ARGV[i], ARGV[i + 1]
  local v = redis.call('HMGET', K.task(task_id), 'state', 'token', 'worker')
  if v[1] == 'LEASED' and v[2] == token and v[3] == ARGV[1] then
    redis.call('ZADD', KEYS[1], 'XX', deadline, task_id)
    redis.call('HSET', K.task(task_id), 'lease_ms', deadline)
    renewed[#renewed + 1] = task_id
    renewed[#renewed + 1] = token
  else
    lost[#lost + 1] = task_id
    lost[#lost + 1] = token
  end
end
return {renewed, lost, deadline}
