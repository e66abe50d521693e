-- ARGV: prefix, worker_id, worker_json, retention_ms. The registry's last-seen time is the
-- Redis clock, so every API replica judges liveness the same way. Returns 1 when the worker was
-- asked to drain (drain_worker.lua), else 0.
local id, json, retention = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
redis.call('SET', worker_key(id), json, 'PX', retention)
redis.call('ZADD', WORKERS, now, id)
redis.call('ZREMRANGEBYSCORE', WORKERS, '-inf', now - retention)
redis.call('PEXPIRE', WORKERS, retention)
return redis.call('EXISTS', drain_key(id))
