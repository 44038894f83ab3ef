-- GPU busy time as a union of GPU op intervals: over the whole trace, and over the ops launched inside ProfilerSteps.
-- scope 'trace': all kernels/memcpys/memsets; window = first to last event of the trace (any category but Trace).
-- scope 'steps': ops launched inside a step; window = first step start to the later of last step end and last op end.
WITH
-- @include recording
step AS (
  SELECT s.id AS step_id, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, t.upid
  FROM slice s CROSS JOIN recording r
  LEFT JOIN thread_track tt ON tt.id = s.track_id LEFT JOIN thread t ON t.utid = tt.utid
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
-- @include launch_step
ops AS (
  SELECT 'trace' AS scope, id, ts, ts + dur AS end_ts FROM gpu_op
  UNION
  SELECT 'steps', g.id, g.ts, g.ts + g.dur
  FROM launch p JOIN launch_step ls ON ls.launch_id = p.launch_id JOIN gpu_op g ON g.id = p.gpu_id
),
prev AS (
  SELECT scope, ts, end_ts,
    MAX(end_ts) OVER (PARTITION BY scope ORDER BY ts, end_ts
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM ops
),
island AS (
  SELECT scope, ts, end_ts,
    SUM(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END)
      OVER (PARTITION BY scope ORDER BY ts, end_ts ROWS UNBOUNDED PRECEDING) AS island
  FROM prev
),
busy AS (
  SELECT scope, SUM(e - b) AS busy_ns, SUM(n) AS gpu_ops, MIN(b) AS first_gpu_start_ns, MAX(e) AS last_gpu_end_ns
  FROM (SELECT scope, island, MIN(ts) AS b, MAX(end_ts) AS e, COUNT(*) AS n FROM island GROUP BY scope, island)
  GROUP BY scope
),
trace_window AS (
  SELECT MIN(ts) AS b, MAX(ts + dur) AS e FROM slice WHERE category IS NOT NULL AND category <> 'Trace'
),
step_window AS (
  SELECT MIN(ts) AS b, MAX(ts + dur) AS e FROM step
)
SELECT 'trace' AS scope, coalesce(bu.gpu_ops, 0) AS gpu_ops, coalesce(bu.busy_ns, 0) AS busy_ns,
  w.b AS window_start_ns, MAX(w.e, coalesce(bu.last_gpu_end_ns, w.e)) AS window_end_ns,
  bu.first_gpu_start_ns, bu.last_gpu_end_ns
FROM trace_window w LEFT JOIN busy bu ON bu.scope = 'trace'
UNION ALL
SELECT 'steps', coalesce(bu.gpu_ops, 0), coalesce(bu.busy_ns, 0),
  w.b, MAX(w.e, coalesce(bu.last_gpu_end_ns, w.e)), bu.first_gpu_start_ns, bu.last_gpu_end_ns
FROM step_window w LEFT JOIN busy bu ON bu.scope = 'steps'
WHERE w.b IS NOT NULL
