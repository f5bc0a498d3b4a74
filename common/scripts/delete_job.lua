-- delete_job.lua — delete a job whose runs have all ended: it disappears from every listing at once, and
-- retention.lua deletes its history (runs, tasks, attempts) later, in bounded batches.
--
-- KEYS[1] jobs   KEYS[2] schedule   KEYS[3] purge
-- ARGV[1] job id   ARGV[2..] digests of the bundles the job names (their reference sets drop it)
-- Returns {status, active run ids}: status 'ok' | 'missing' (no such job: deleted already, or never was) |
-- 'active' (runs of the job have not ended — listed, sorted; nothing was changed: cancel them and call again) |
-- 'children' (child jobs fire after this one — listed, sorted; nothing was changed: delete them first).
--
-- Invariant: a job is deleted only with no active run, in one step with every index entry naming it, so no
-- firing (fire.lua needs the job hash) and no task of it can start afterwards; a firing that raced the
-- caller's cancel shows up here as an active run.
local job_id = ARGV[1]
if redis.call('EXISTS', K.job(job_id)) == 0 then return {'missing', {}} end
local active = redis.call('SMEMBERS', K.job_active(job_id))
if #active > 0 then
  table.sort(active)
  return {'active', active}
end
local children = redis.call('SMEMBERS', K.job_children(job_id))
if #children > 0 then
  table.sort(children)
  return {'children', children}
end
unlink_job(job_id, now_ms())
for i = 2, #ARGV do redis.call('SREM', K.bundle_jobs(ARGV[i]), job_id) end
return {'ok', {}}
