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
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur
  FROM slice s CROSS JOIN recording r
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
)
SELECT g.id AS gpu_id, g.name AS gpu_name, g.cat AS gpu_category, g.ts AS gpu_start_ns, g.dur AS gpu_dur_ns,
  t.tid AS stream,
  l.id AS launch_id, l.name AS launch_name, l.ts AS launch_start_ns, l.dur AS launch_dur_ns,
  g.ts - l.ts AS latency_ns, p.paired_by,
  (SELECT st.step FROM step st WHERE l.ts >= st.ts AND l.ts < st.ts + st.dur ORDER BY st.ts LIMIT 1) AS step
FROM launch p
JOIN slice l ON l.id = p.launch_id
JOIN gpu_op g ON g.id = p.gpu_id
JOIN thread_track tt ON tt.id = g.track_id
JOIN thread t USING (utid)
ORDER BY g.ts, g.id
