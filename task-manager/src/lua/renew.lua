-- ARGV: prefix, task_id, lease_token, lease_ttl_ms. Returns 'held', 'cancelled' or 'lost'.
local id, token, lease_ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local f = redis.call('HMGET', task_key(id), 'status', 'lease_token')
if f[1] == 'cancelled' then return 'cancelled' end
if f[1] == 'running' and f[2] == token then
  redis.call('ZADD', LEASES, 'XX', now_ms() + lease_ttl, id)
  return 'held'
end
return 'lost'
