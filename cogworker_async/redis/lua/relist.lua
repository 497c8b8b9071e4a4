-- relist: a process whose keys Redis lost (a restart without persistence, a failover to a
-- replica that had not seen them) puts the jobs it is still running, or has finished
-- but not settled, back on its own in-progress list: a crash from now on recovers them,
-- and their settle scripts (which find a job on the list by exact value) work again.
-- KEYS[1] this process's in-progress list   KEYS[2] declared_dead set
-- ARGV[1] this process's identity           ARGV[2..] raw jobs as fetched
-- Returns how many were listed again (a job already on the list is left alone: safe to
-- run twice), or -1 without listing anything while the process is marked declared dead:
-- its jobs may run elsewhere, and it must fence itself first (fencing clears the mark).
-- Model: none — Redis losing a process's keys: the separate durability configuration, not modelled
if redis.pcall("SISMEMBER", KEYS[2], ARGV[1]) == 1 then
  return -1
end
local listed = 0
for i = 2, #ARGV do
  if not redis.call("LPOS", KEYS[1], ARGV[i]) then
    redis.call("LPUSH", KEYS[1], ARGV[i])
    listed = listed + 1
  end
end
return listed
