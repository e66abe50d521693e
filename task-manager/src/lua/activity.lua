-- Reads the recent activity (prelude's record_activity writes it). ARGV: prefix.
-- Returns {now_ms, failures JSON ('' for none), then for each of the ACTIVITY_BUCKETS newest
-- minutes by Redis time: minute, its counts JSON ('' for none)}.
local now = now_ms()
local minute = math.floor(now / ACTIVITY_BUCKET_MS)
local fields = {}
for i = 0, ACTIVITY_BUCKETS - 1 do fields[i + 1] = activity_field(minute - i) end
local counts = redis.call('HMGET', STATS, unpack(fields))
local out = { string.format('%d', now), redis.call('HGET', STATS, ACTIVITY_FAILURES_FIELD) or '' }
for i = 1, ACTIVITY_BUCKETS do
  out[#out + 1] = string.format('%d', minute - i + 1)
  out[#out + 1] = counts[i] or ''
end
return out
