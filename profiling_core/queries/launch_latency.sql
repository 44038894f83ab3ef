-- Each GPU op (kernel, memcpy, memset) with the CPU call that launched it and the queueing delay (GPU start - launch start).
-- Pairs come from the flow table (ac2g flows); ops without a flow are paired by args.correlation (older traces).
WITH
-- @include recording
gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id, track_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, t.upid
  FROM slice s CROSS JOIN recording r
  LEFT JOIN thread_track tt ON tt.id = s.track_id LEFT JOIN thread t ON t.utid = tt.utid
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
-- @include launch_step
first_step AS (
  SELECT ls.launch_id, st.step FROM launch_step ls JOIN step st ON st.step_id = ls.step_id
  WHERE NOT EXISTS (SELECT 1 FROM launch_step o WHERE o.launch_id = ls.launch_id
                    AND (o.step_ts < ls.step_ts OR (o.step_ts = ls.step_ts AND o.step_id < ls.step_id)))
)
SELECT g.id AS gpu_id, g.name AS gpu_name, g.cat AS gpu_category, g.ts AS gpu_start_ns, g.dur AS gpu_dur_ns,
  t.tid AS stream,
  l.id AS launch_id, l.name AS launch_name, l.ts AS launch_start_ns, l.dur AS launch_dur_ns,
  g.ts - l.ts AS latency_ns, p.paired_by,
  fs.step
FROM launch p
LEFT JOIN first_step fs ON fs.launch_id = p.launch_id
JOIN slice l ON l.id = p.launch_id
JOIN gpu_op g ON g.id = p.gpu_id
JOIN thread_track tt ON tt.id = g.track_id
JOIN thread t USING (utid)
ORDER BY g.ts, g.id
