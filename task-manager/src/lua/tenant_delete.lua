-- Deletes a tenant by name: its token and record go at once (so its next request is refused,
-- and so is any submission still on its way), it leaves the fair shares, its running tasks are
-- cancelled (their workers learn it at their next renewal), and it is marked for purging:
-- tenant_purge.lua cancels its queued tasks in chunks.
-- ARGV: prefix, name, result_ttl_ms, reason (the error of its cancelled tasks).
-- Returns {'not_found'} or {'deleted', id, queued, cancelled_running}.
local name, ttl, reason = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local id = redis.call('HGET', TENANT_NAMES, name)
if not id then return { 'not_found' } end
local token = redis.call('HGET', tenant_key(id), 'token')
if token then redis.call('HDEL', TOKENS, token) end
redis.call('HDEL', TENANT_NAMES, name)
redis.call('DEL', tenant_key(id))
redis.call('HDEL', TENANT_WEIGHTS, id)
-- It leaves every class's fair share, and no claim brings it back for tasks of no class.
local claimers = redis.call('HGETALL', CLAIM_CLASSES)
for i = 1, #claimers, 2 do redis.call('ZREM', active_key(claimers[i]), id) end
redis.call('HDEL', UNCLASSED, id)
redis.call('HSET', PURGING, id, reason)
local queued = tonumber(redis.call('HGET', TENANT_QUEUED, id)) or 0
local now = now_ms()
local running = 0
-- Every running task holds a lease; the leases of all tenants are few (a handful per worker).
for _, task in ipairs(redis.call('ZRANGE', LEASES, 0, -1)) do
  local f = redis.call('HMGET', task_key(task), 'tenant', 'status')
  if f[1] == id and f[2] == 'running' then
    redis.call('ZREM', LEASES, task)
    redis.call('HSET', task_key(task), 'error', reason)
    transition(task, 'running', 'cancelled', now, ttl)
    running = running + 1
  end
end
return { 'deleted', id, queued, running }
