-- Fragment (not a query): recording(end_ts), the end of the recording: the latest end of the profiler's own Trace
-- slices (Kineto's "PyTorch Profiler (N)"), NULL where the trace has none. A step's window ends no later than it: a
-- step slice can be written with an end long after the profiler stopped, and nothing of it was recorded past that
-- point (a step starting after it keeps no time). Step CTEs cut their dur with
-- CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END (r: recording).
recording AS (
  SELECT MAX(ts + dur) AS end_ts FROM slice WHERE lower(category) = 'trace'
),
