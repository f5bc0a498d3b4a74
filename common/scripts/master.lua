-- master.lua — a master records itself in the list of masters (`sparkyard status` shows it).
--
-- KEYS (none: K.masters)
-- ARGV[1] master id   ARGV[2] its record (JSON: address, role, seen_ms)
-- Returns 'ok'.
--
-- Deliberately not fenced: a standby records itself too (it has no epoch to show), and a master writes
-- only its own entry, which only informs — no scheduling decision reads it.
redis.call('HSET', K.masters, ARGV[1], ARGV[2])
return 'ok'
