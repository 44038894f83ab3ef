-- One row per ProfilerStep#N (CPU slice) in time order: CPU duration, GPU ops and launch calls, GPU busy time (union).
-- GPU ops (kernel, memcpy, memset) belong to the step whose time window holds their launch call (of the call's own
-- process, where it has steps: the launch_step fragment); a launch call is
-- paired with its GPU op by the flow table, or by args.correlation where the trace has no flow for that op.
-- gpu_busy_ns: union of the intervals of the GPU ops launched in the step (they may run after the step ends).
-- gpu_busy_in_step_ns: union of all GPU op intervals clipped to the step's own window [ts, ts + dur).
WITH
-- @include recording
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.name, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, tt.utid, t.upid
  FROM slice s CROSS JOIN recording r JOIN thread_track tt ON tt.id = s.track_id LEFT JOIN thread t ON t.utid = tt.utid
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
-- @include launch_step
op_in_step AS (
  SELECT DISTINCT ls.step_id, p.launch_id, g.id AS gpu_id, g.cat, g.ts, g.ts + g.dur AS end_ts
  FROM launch p
  JOIN launch_step ls ON ls.launch_id = p.launch_id
  JOIN gpu_op g ON g.id = p.gpu_id
),
-- union of intervals, "gaps and islands": an op opens a new island when it starts after every earlier op ended
launched_prev AS (
  SELECT step_id, ts, end_ts,
    MAX(end_ts) OVER (PARTITION BY step_id ORDER BY ts, end_ts
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM op_in_step
),
launched_island AS (
  SELECT step_id, ts, end_ts,
    SUM(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END)
      OVER (PARTITION BY step_id ORDER BY ts, end_ts ROWS UNBOUNDED PRECEDING) AS island
  FROM launched_prev
),
launched_busy AS (
  SELECT step_id, SUM(e - b) AS busy FROM (
    SELECT step_id, island, MIN(ts) AS b, MAX(end_ts) AS e FROM launched_island GROUP BY step_id, island
  ) GROUP BY step_id
),
clipped AS (
  SELECT st.step_id, MAX(g.ts, st.ts) AS ts, MIN(g.ts + g.dur, st.ts + st.dur) AS end_ts
  FROM step st JOIN gpu_op g ON g.ts < st.ts + st.dur AND g.ts + g.dur > st.ts
),
clipped_prev AS (
  SELECT step_id, ts, end_ts,
    MAX(end_ts) OVER (PARTITION BY step_id ORDER BY ts, end_ts
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM clipped
),
clipped_island AS (
  SELECT step_id, ts, end_ts,
    SUM(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END)
      OVER (PARTITION BY step_id ORDER BY ts, end_ts ROWS UNBOUNDED PRECEDING) AS island
  FROM clipped_prev
),
clipped_busy AS (
  SELECT step_id, SUM(e - b) AS busy FROM (
    SELECT step_id, island, MIN(ts) AS b, MAX(end_ts) AS e FROM clipped_island GROUP BY step_id, island
  ) GROUP BY step_id
),
counts AS (
  SELECT step_id,
    COUNT(DISTINCT gpu_id) AS gpu_ops,
    COUNT(DISTINCT CASE WHEN cat = 'kernel' THEN gpu_id END) AS kernels,
    COUNT(DISTINCT CASE WHEN cat IN ('gpu_memcpy', 'memcpy') THEN gpu_id END) AS memcpys,
    COUNT(DISTINCT CASE WHEN cat IN ('gpu_memset', 'memset') THEN gpu_id END) AS memsets,
    COUNT(DISTINCT launch_id) AS launches,
    COUNT(DISTINCT CASE WHEN cat = 'kernel' THEN launch_id END) AS kernel_launches,
    MIN(ts) AS first_gpu_start_ns,
    MAX(end_ts) AS last_gpu_end_ns
  FROM op_in_step GROUP BY step_id
)
SELECT st.step, st.name, st.step_id AS slice_id, st.ts AS start_ns, st.dur AS cpu_dur_ns,
  coalesce(lb.busy, 0) AS gpu_busy_ns,
  coalesce(cb.busy, 0) AS gpu_busy_in_step_ns,
  coalesce(c.gpu_ops, 0) AS gpu_ops,
  coalesce(c.kernels, 0) AS kernels,
  coalesce(c.memcpys, 0) AS memcpys,
  coalesce(c.memsets, 0) AS memsets,
  coalesce(c.launches, 0) AS launches,
  coalesce(c.kernel_launches, 0) AS kernel_launches,
  c.first_gpu_start_ns,
  c.last_gpu_end_ns
FROM step st
LEFT JOIN launched_busy lb ON lb.step_id = st.step_id
LEFT JOIN clipped_busy cb ON cb.step_id = st.step_id
LEFT JOIN counts c ON c.step_id = st.step_id
ORDER BY st.ts, st.step_id
