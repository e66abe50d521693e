-- Takes the reaper lease for a holder, or renews it when the holder has it already; refuses
-- while another holder's lease lasts. The expiry is Redis's own (PX), so every node shares its
-- clock. ARGV: prefix, holder, ttl_ms. Returns 1 when the holder leads, 0 when it stands by.
local holder, ttl = ARGV[2], tonumber(ARGV[3])
local current = redis.call('GET', REAPER)
if current == false then
  redis.call('SET', REAPER, holder, 'PX', ttl)
  return 1
elseif current == holder then
  redis.call('PEXPIRE', REAPER, ttl)
  return 1
end
return 0
