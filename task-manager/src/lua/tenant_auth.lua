-- The tenant a token's SHA-256 names, read in one step so that a deletion is never seen half
-- done. ARGV: prefix, token_sha256.
-- Returns its tenant_row (prelude) or nil.
local id = redis.call('HGET', TOKENS, ARGV[2])
if not id then return false end
return tenant_row(id)
