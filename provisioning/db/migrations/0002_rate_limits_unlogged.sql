-- Rate-limit counters are worth nothing after a crash (a window restarts
-- early, at worst). Unlogged, counting a hit writes no WAL and its commit
-- waits for no flush: logins and onboarding stop paying a disk sync for it.
ALTER TABLE rate_limits SET UNLOGGED;
