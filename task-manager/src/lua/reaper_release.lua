-- Gives the reaper lease up if the holder has it, so that a standby takes over at once.
-- ARGV: prefix, holder. Returns 1 when it was the holder's, else 0.
if redis.call('GET', REAPER) == ARGV[2] then
  redis.call('DEL', REAPER)
  return 1
end
return 0
