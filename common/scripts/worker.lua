-- worker.lua — record a worker as `sparkyard workers` shows it.
--
-- KEYS[1] workers   ARGV[1] worker id   ARGV[2] its record (JSON)
--
-- A plain HSET, but fenced like every write: a deposed leader's last view of its workers (all of them
-- disconnecting as it steps down) never overwrites what the current leader recorded.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
