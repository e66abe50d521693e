-- The tenant a token's SHA-256 names, read in one step so that a deletion is never seen half
-- done. ARGV: prefix, token_sha256.
-- Returns {id, TENANT_FIELDS...} (nil where unset) or nil.
local id = redis.call('HGET', TOKENS, ARGV[2])
if not id then return false end
local f = redis.call('HMGET', tenant_key(id), unpack(TENANT_FIELDS))
if not f[1] then return false end
table.insert(f, 1, id)
return f
