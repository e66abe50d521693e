-- Requeues or fails tasks whose lease expired, at most `limit` per call so that one call never
-- blocks Redis for long. ARGV: prefix, max_attempts, result_ttl_ms, limit.
-- Returns {requeued, failed, examined}.
local max_attempts, ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, limit)
local requeued, failed = 0, 0
for _, id in ipairs(expired) do
  local f = redis.call('HMGET', task_key(id), 'status', 'attempts', 'worker_id')
  if f[1] ~= 'running' then
    redis.call('ZREM', LEASES, id)
  else
    local reason = string.format('lease expired on attempt %s of %d (worker %s stopped renewing)',
      f[2] or '?', max_attempts, f[3] or '?')
    if requeue_or_fail(id, max_attempts, ttl, now, reason) == 'failed' then
      failed = failed + 1
    else
      requeued = requeued + 1
    end
  end
end
return { requeued, failed, #expired }
