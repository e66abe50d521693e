-- ARGV: prefix, task_id, lease_token, reason, max_attempts, result_ttl_ms.
-- Returns 'requeued', 'failed' or 'stale'.
local id, token, reason = ARGV[2], ARGV[3], ARGV[4]
local max_attempts, ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local f = redis.call('HMGET', task_key(id), 'status', 'lease_token')
if f[1] ~= 'running' or f[2] ~= token then return 'stale' end
return requeue_or_fail(id, max_attempts, ttl, now_ms(), reason)
