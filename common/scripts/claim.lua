-- claim.lua — lease READY tasks to workers: the only way a task reaches a worker.
--
-- KEYS[1] ready:{group}   KEYS[2] leases   KEYS[3] fence   KEYS[4] timeouts
-- ARGV[1] lease ms   ARGV[2] timeout grace ms (master backstop beyond the task timeout)
-- ARGV[3..] pairs: task id, worker id
-- Returns, per claimed task, a flat group of 12: task id, worker, fencing token, attempt number,
-- run id, job id, task index, inputs JSON, run scheduled ms, run task count, the run's spec version, and
-- a pipeline step's upstream results (JSON, '' for other runs). Tasks no longer READY are skipped.
--
-- Invariant: a task leaves the ready queue only here, atomically with its lease entry, a new fencing
-- token (strictly greater than every token before it: the batch reserves its range with one INCRBY) and
-- its running attempt (number, worker, token, leased time in the task hash; a previous, ended attempt is
-- archived to task:{task}:attempts first) — so every result can be matched to exactly one attempt and a
-- stale one is recognisable forever.
local now = now_ms()
local lease_ms = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local out = {}
local token = redis.call('INCRBY', KEYS[3], (#ARGV - 2) / 2) - (#ARGV - 2) / 2
local runs = {}  -- run id → {state, scheduled_ms, task_count, timeout_ms, spec_v}: the tasks of a split run share one
for i = 3, #ARGV, 2 do
  local task_id, worker = ARGV[i], ARGV[i + 1]
  local tkey = K.task(task_id)
  token = token + 1
  if redis.call('ZREM', KEYS[1], task_id) == 1 then
    local v = redis.call('HMGET', tkey, 'state', 'attempts', 'run_id', 'job_id', 'index', 'inputs')
    if may('task', v[1], 'LEASED') then
      local run_id = v[3]
      local r = runs[run_id]
      if not r then
        r = redis.call('HMGET', K.run(run_id), 'state', 'scheduled_ms', 'task_count', 'timeout_ms', 'spec_v',
                       'upstream')
        runs[run_id] = r
      end
      local attempt = tonumber(v[2] or '0') + 1
      local deadline = now + lease_ms
      local timeout = tonumber(r[4] or '0')
      local fields = {'state', 'LEASED', 'token', token, 'worker', worker, 'attempts', attempt,
                      'lease_ms', deadline, 'att_leased_ms', now}
      if attempt > 1 then
        archive_attempt(task_id, tkey)
        push(fields, 'not_before_ms', '', 'att_started_ms', 0, 'att_log', '')
      end
      if timeout > 0 then
        push(fields, 'tmo', 1)
        redis.call('ZADD', KEYS[4], now + timeout + grace, task_id)
      end
      redis.call('HSET', tkey, unpack(fields))
      redis.call('ZADD', KEYS[2], deadline, task_id)
      redis.call('SADD', K.worker_leases(worker), task_id)
      if may('run', r[1], 'RUNNING') then
        -- A run fired ahead of its time (the master's --fire-ahead) begins at its time: its worker starts it then.
        redis.call('HSET', K.run(run_id), 'state', 'RUNNING', 'started_ms', math.max(now, tonumber(r[2]) or 0))
        r[1] = 'RUNNING'
      end
      push(out, task_id, worker, token, attempt, run_id, v[4], v[5], v[6] or '', r[2], r[3], r[5] or 1, r[6] or '')
    end
  end
end
return out
