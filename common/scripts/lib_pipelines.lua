-- lib_pipelines.lua — the pipeline functions (docs/pipelines.md), for the scripts that make or end runs.
--
-- Rendered right after lib.lua, and only into the scripts that can reach these functions (master/scripts.py
-- PIPELINE_SCRIPTS: they call lib.lua's create_run or settle_run, or pipeline_end; tests/contract/
-- test_one_door.py checks the list against the scripts' calls). It uses lib.lua's functions (create_run,
-- settle_run, may, push) and defines two locals lib.lua declares for it: step_ended (settle_run calls it
-- when a step's run ends) and create_pipeline_run (create_run calls it for a pipeline's run). Why a file of
-- its own: lib.lua is the state machine of tasks, attempts, runs and jobs; pipelines are one more layer on
-- runs, and the scripts that never end a run (claim, renew, the leader's, the bundles'…) carry none of it.
--
-- A pipeline run is a run of the pipeline's job whose "tasks" are its steps: task_count is the number of
-- steps and its counters count ended steps (SUCCEEDED and SKIPPED as succeeded, FAILED and UPSTREAM_FAILED
-- as dead), so settle_run ends it as it ends any run. Its hash keeps the graph it was fired with (a run in
-- progress keeps its version); run:{run}:steps keeps each step's state, its run id once made, and its run
-- block until then. A step's run is an ordinary run of the step's job, marked with prun and step.
--
-- Invariant: a step's end and the release of every step it makes ready happen in the script that ended
-- the step's run (settle_run → step_ended), so no step is ever released twice or never: a step leaves
-- PENDING exactly once, along an edge of EDGES.step, and its run id is the step's job id and the pipeline
-- run's time, so a second attempt to make it would find the run key taken.
local STEP_COUNTER = {SUCCEEDED = 'succeeded', SKIPPED = 'succeeded', FAILED = 'dead', UPSTREAM_FAILED = 'dead',
                      CANCELLED = 'cancelled'}

-- What a step's trigger rule makes of its upstream steps' end states: 'RUN', 'SKIPPED' or 'UPSTREAM_FAILED'.
local function rule_verdict(rule, ups)
  local failed, skipped, cancelled = 0, 0, 0
  for _, s in ipairs(ups) do
    if s == 'FAILED' or s == 'UPSTREAM_FAILED' then failed = failed + 1
    elseif s == 'SKIPPED' then skipped = skipped + 1
    elseif s == 'CANCELLED' then cancelled = cancelled + 1 end
  end
  if rule == 'ALL_DONE' then return 'RUN' end
  if rule == 'ONE_FAILED' then return failed > 0 and 'RUN' or 'SKIPPED' end
  if failed > 0 or cancelled > 0 then return 'UPSTREAM_FAILED' end
  if rule == 'NONE_FAILED' or skipped == 0 then return 'RUN' end
  return 'SKIPPED'
end

-- The results of a step's upstream steps as JSON text {step: result} (ctx.upstream): a one-task step's
-- result, else the list of its tasks' results; null for a task without one, or a step that did not run.
-- Built from the stored JSON texts, never decoded (each is within the master's --result-max-bytes).
local function upstream_results(skey, after)
  local parts = {}
  for _, up in ipairs(after) do
    local run_id = redis.call('HGET', skey, 'r:' .. up)
    local value = 'null'
    if run_id then
      local n = tonumber(redis.call('HGET', K.run(run_id), 'task_count') or '0')
      local results = {}
      for i = 0, n - 1 do
        local r = redis.call('HGET', K.task(task_id(run_id, i)), 'result')
        results[#results + 1] = (r and r ~= '') and r or 'null'
      end
      if n == 1 then value = results[1] elseif n > 1 then value = '[' .. table.concat(results, ',') .. ']' end
    end
    parts[#parts + 1] = cjson.encode(up) .. ':' .. value
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- Make the run of step g ({name, job id, {after}, rule}) of pipeline run `prun`; returns the step's state.
local function start_step(prun, skey, g, scheduled, now)
  local name, job_id = g[1], g[2]
  local b = cjson.decode(redis.call('HGET', skey, 'b:' .. name))
  b.prun, b.step = prun, name
  if #g[3] > 0 then b.upstream = upstream_results(skey, g[3]) end
  local run_id = job_id .. '.' .. string.sub(prun, -13)
  local job_key = K.job(job_id)
  redis.call('ZADD', K.job_runs(job_id), scheduled, run_id)
  redis.call('HSET', job_key, 'last_run_id', run_id, 'updated_ms', now)
  local state = create_run(job_key, job_id, run_id, scheduled, now, b, false)
  -- A step whose split made no task ended as its run was made (create_run: SUCCEEDED at once).
  local step_state = state == 'SUCCEEDED' and 'SUCCEEDED' or 'RUNNING'
  redis.call('HSET', skey, name, step_state, 'r:' .. name, run_id)
  redis.call('HDEL', skey, 'b:' .. name)
  return step_state
end

-- Settle every PENDING step whose upstream steps have all ended, until none is left to settle. Returns the
-- number of steps that ended here (they are counted in the run's counters).
local function release_steps(prun, now)
  local rkey, skey = K.run(prun), K.run_steps(prun)
  local r = redis.call('HMGET', rkey, 'graph', 'scheduled_ms')
  local graph = cjson.decode(r[1])
  local names = {}
  for i, g in ipairs(graph) do names[i] = g[1] end
  local states = {}
  for i, s in ipairs(redis.call('HMGET', skey, unpack(names))) do states[names[i]] = s end
  local moved = true
  while moved do
    moved = false
    for _, g in ipairs(graph) do
      if states[g[1]] == 'PENDING' then
        local ups, ready = {}, true
        for _, u in ipairs(g[3]) do
          local s = states[u]
          if s == 'PENDING' or s == 'RUNNING' then ready = false break end
          ups[#ups + 1] = s
        end
        if ready then
          local verdict = rule_verdict(g[4], ups)
          local state = verdict
          if verdict == 'RUN' then
            state = start_step(prun, skey, g, r[2], now)
          else
            redis.call('HSET', skey, g[1], state)
            redis.call('HDEL', skey, 'b:' .. g[1])
          end
          if state ~= 'RUNNING' then redis.call('HINCRBY', rkey, STEP_COUNTER[state], 1) end
          states[g[1]] = state
          moved = true
        end
      end
    end
  end
end

-- Store a new pipeline run (its run fields ready in `fields`) with every step PENDING, then release the
-- steps that wait for nothing. Returns its state: RUNNING (it joins K.running_pipelines), or the end state
-- if every step ended at once.
create_pipeline_run = function(job_id, run_id, now, b, fields)
  local graph = cjson.encode(b.graph)
  push(fields, 'graph', graph, 'started_ms', now)
  fields[2] = 'RUNNING'
  redis.call('HSET', K.run(run_id), unpack(fields))
  redis.call('SADD', K.job_active(job_id), run_id)
  local steps, kept = {}, 0
  for _, g in ipairs(b.graph) do
    local keep = b.keep[g[1]]  -- a rerun of failed steps keeps what succeeded, with its run
    if keep then
      push(steps, g[1], 'SUCCEEDED', 'r:' .. g[1], keep)
      kept = kept + 1
    else
      push(steps, g[1], 'PENDING', 'b:' .. g[1], cjson.encode(b.steps[g[1]]))
    end
  end
  redis.call('HSET', K.run_steps(run_id), unpack(steps))
  if kept > 0 then redis.call('HSET', K.run(run_id), 'succeeded', kept) end
  release_steps(run_id, now)
  local ended = settle_run(run_id, now)
  if ended ~= '' then return ended end
  redis.call('ZADD', K.running_pipelines, now, run_id)  -- until pipeline_ended
  return 'RUNNING'
end

-- Pipeline runs ended by this script call, by the step run whose end ended each: {pipeline run, state, ms
-- from its firing to its end}. A script that returns a run's end returns with it the pipeline run's end that
-- it caused (pipeline_end), so the master learns both from one reply.
local PIPELINE_ENDS = {}

-- A pipeline run ended (settle_run, called by step_ended): it leaves the index of running pipeline runs
-- (K.running_pipelines, what the metrics page counts) in the same step.
local function pipeline_ended(prun, state, by_run, now)
  redis.call('ZREM', K.running_pipelines, prun)
  local fired = tonumber(redis.call('HGET', K.run(prun), 'fired_ms') or now)
  PIPELINE_ENDS[by_run] = {prun, state, now - fired}
end

-- What a script returns after a run's end (run_state: '' unless the run ended in this very call, so a
-- pipeline run's end is returned once): the pipeline run it ended, its state and duration; else '', '', 0.
local function pipeline_end(run_id, run_state)
  local e = run_state ~= '' and PIPELINE_ENDS[run_id]
  if e then return e[1], e[2], e[3] end
  return '', '', 0
end

-- The run of a step ended (settle_run): end the step, release what it makes ready, and end the pipeline
-- run when no step can run any more (pipeline_ended).
step_ended = function(prun, name, run_id, run_state, now)
  local skey = K.run_steps(prun)
  if run_state == 'SUCCEEDED' then  -- every task of it called ctx.skip(): the step is SKIPPED
    local v = redis.call('HMGET', K.run(run_id), 'skipped_tasks', 'task_count')
    if v[1] and v[1] == v[2] then run_state = 'SKIPPED' end
  end
  local current = redis.call('HGET', skey, name)
  if not current or not may('step', current, run_state) then return end
  redis.call('HSET', skey, name, run_state)
  redis.call('HINCRBY', K.run(prun), STEP_COUNTER[run_state], 1)
  release_steps(prun, now)
  local ended = settle_run(prun, now)
  if ended ~= '' then pipeline_ended(prun, ended, run_id, now) end
end

-- Cancel the steps of a pipeline run that have not started (they never will); returns the task ids of its
-- running steps' runs, for the caller to cancel like any run's tasks.
local function cancel_pipeline_steps(prun)
  local skey = K.run_steps(prun)
  local graph = cjson.decode(redis.call('HGET', K.run(prun), 'graph'))
  local tasks = {}
  for _, g in ipairs(graph) do
    local v = redis.call('HMGET', skey, g[1], 'r:' .. g[1])
    if v[1] == 'PENDING' then
      redis.call('HSET', skey, g[1], 'CANCELLED')
      redis.call('HDEL', skey, 'b:' .. g[1])
      redis.call('HINCRBY', K.run(prun), 'cancelled', 1)
    elseif v[1] == 'RUNNING' then
      local n = tonumber(redis.call('HGET', K.run(v[2]), 'task_count') or '0')
      for i = 0, n - 1 do tasks[#tasks + 1] = task_id(v[2], i) end
    end
  end
  return tasks
end
