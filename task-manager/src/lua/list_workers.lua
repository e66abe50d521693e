-- ARGV: prefix, retention_ms. Returns {now, id_1, last_seen_1, json_1, ...}; workers silent for
-- longer than the retention are dropped.
local retention = tonumber(ARGV[2])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', WORKERS, '-inf', now - retention)
local entries = redis.call('ZRANGE', WORKERS, 0, -1, 'WITHSCORES')
local out = { now }
for i = 1, #entries, 2 do
  local id = entries[i]
  local json = redis.call('GET', worker_key(id))
  if json then
    out[#out + 1] = id
    out[#out + 1] = entries[i + 1]
    out[#out + 1] = json
  else
    redis.call('ZREM', WORKERS, id)
  end
end
return out
