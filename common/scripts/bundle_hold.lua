-- bundle_hold.lua — a client is told a bundle is here: keep it long enough for the job that names it.
--
-- KEYS[1] bundle:{digest}
-- Returns 1 if the bundle is stored (its held_ms is now the caller's time), 0 if it is not.
--
-- Invariant: a bundle a client was told is present is not collected within the grace after that answer
-- (bundle_gc.lua reads held_ms), so the submit that follows finds it. Without it a bundle whose jobs had
-- all ended could be collected between the client's check and its submit, and the submit was refused.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'held_ms', now_ms())
return 1
