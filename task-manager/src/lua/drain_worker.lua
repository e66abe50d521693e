-- ARGV: prefix, worker_id, retention_ms. Asks a registered worker to drain: its heartbeat
-- (heartbeat.lua) answers the mark. Returns 1, or 0 when no such worker is registered. The mark
-- expires with the registry's retention, so a worker that never comes back leaves nothing.
local id, retention = ARGV[2], tonumber(ARGV[3])
if redis.call('EXISTS', worker_key(id)) == 0 then
  return 0
end
redis.call('SET', drain_key(id), '1', 'PX', retention)
return 1
