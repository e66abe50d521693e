-- ARGV: prefix, task_id, lease_token, result_json, result_ttl_ms, verdict, error_code ('' for
-- none), error_message ('' for none). Returns 'accepted' or 'stale'.
-- The verdict also becomes the cached result for the task's request, in the cache namespace
-- of its tenant; verdict, code and message are what the recent activity records of it.
local id, token, result, ttl = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local outcome = { verdict = ARGV[6] }
if ARGV[7] ~= '' then outcome.code = ARGV[7] end
if ARGV[8] ~= '' then outcome.message = ARGV[8] end
local key = task_key(id)
local f = redis.call('HMGET', key, 'status', 'lease_token', 'ckey', 'cns')
if f[1] ~= 'running' or f[2] ~= token then return 'stale' end
redis.call('ZREM', LEASES, id)
redis.call('HSET', key, 'result', result)
if f[3] and f[4] then redis.call('SET', rcache_key(f[4], f[3]), result, 'PX', ttl) end
transition(id, 'running', 'done', now_ms(), ttl, outcome)
return 'accepted'
