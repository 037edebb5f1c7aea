-- Each counter says when its window ends, so that counters of windows that
-- have ended can be removed (proxy.ratelimit.CounterSweeper): keys are
-- partly chosen by clients (an email per login attempt), and nothing else
-- ever deletes a row. The default covers rows written by a replica still on
-- the code before this (the longest default window is an hour); at worst
-- such a counter is removed early, and its window restarts early.
ALTER TABLE rate_limits ADD COLUMN window_end timestamptz NOT NULL DEFAULT now() + interval '1 hour';
CREATE INDEX rate_limits_window_end ON rate_limits (window_end);
