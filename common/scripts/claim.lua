-- claim.lua — lease READY tasks to workers: the only way a task reaches a worker.
--
-- KEYS[1] ready:{group}   KEYS[2] leases   KEYS[3] fence   KEYS[4] timeouts
-- ARGV[1] lease ms   ARGV[2] timeout grace ms (master backstop beyond the task timeout)
-- ARGV[3..] pairs: task id, worker id
-- Returns, per claimed task, a flat group of 10: task id, worker, fencing token, attempt number,
-- run id, job id, task index, inputs JSON, run scheduled ms, run task count. Tasks no longer READY are skipped.
--
-- Invariant: a task leaves the ready queue only here, atomically with its lease entry, a new fencing
-- token (INCR: strictly greater than every token before it) and its running attempt (number, worker,
-- token, leased time in the task hash; archived to task:{task}:attempts when it ends) — so every result
-- can be matched to exactly one attempt and a stale one is recognisable forever.
local now = now_ms()
local lease_ms = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local task_id, worker = ARGV[i], ARGV[i + 1]
  local tkey = K.task(task_id)
  if redis.call('ZREM', KEYS[1], task_id) == 1 then
    local v = redis.call('HMGET', tkey, 'state', 'attempts', 'run_id', 'job_id', 'index', 'inputs')
    if v[1] == 'READY' then
      local rkey = K.run(v[3])
      local r = redis.call('HMGET', rkey, 'state', 'scheduled_ms', 'task_count', 'timeout_ms')
      local token = redis.call('INCR', KEYS[3])
      local attempt = tonumber(v[2] or '0') + 1
      local deadline = now + lease_ms
      redis.call('HSET', tkey, 'state', 'LEASED', 'token', token, 'worker', worker, 'attempts', attempt,
                 'lease_ms', deadline, 'not_before_ms', '', 'att_leased_ms', now, 'att_started_ms', 0,
                 'att_log', '')
      redis.call('ZADD', KEYS[2], deadline, task_id)
      redis.call('SADD', K.worker_leases(worker), task_id)
      local timeout = tonumber(r[4] or '0')
      if timeout > 0 then redis.call('ZADD', KEYS[4], now + timeout + grace, task_id) end
      if r[1] == 'SCHEDULED' then redis.call('HSET', rkey, 'state', 'RUNNING', 'started_ms', now) end
      push(out, task_id, worker, token, attempt, v[3], v[4], v[5], v[6], r[2], r[3])
    end
  end
end
return out
