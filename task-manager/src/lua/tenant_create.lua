-- Creates a tenant. ARGV: prefix, tenant_id, name, token_sha256, max_queued ('' for none),
-- weight, share_cache ('1' or '0'), cache_ns.
-- Returns {'created', created_at_ms}, {'exists'} or {'token_taken'}.
local id, name, token, max_queued = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HEXISTS', TENANT_NAMES, name) == 1 then return { 'exists' } end
if redis.call('HEXISTS', TOKENS, token) == 1 then return { 'token_taken' } end
local now = now_ms()
local key = tenant_key(id)
redis.call('HSET', key, 'name', name, 'token', token, 'share_cache', ARGV[7], 'cache_ns', ARGV[8],
  'created_at', now)
if max_queued ~= '' then redis.call('HSET', key, 'max_queued', max_queued) end
redis.call('HSET', TENANT_WEIGHTS, id, ARGV[6])
redis.call('HSET', TENANT_NAMES, name, id)
redis.call('HSET', TOKENS, token, id)
return { 'created', now }
