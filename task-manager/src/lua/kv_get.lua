-- ARGV: prefix, namespace, key. Returns the value (nil when absent or expired) and counts the
-- lookup as a hit or a miss of the namespace in the stats hash, atomically with the read.
local ns, key = ARGV[2], ARGV[3]
local value = redis.call('GET', kv_key(ns, key))
if value then
  redis.call('HINCRBY', STATS, kv_hits_field(ns), 1)
else
  redis.call('HINCRBY', STATS, kv_misses_field(ns), 1)
end
return value
