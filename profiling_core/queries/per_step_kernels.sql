-- Each GPU op launched inside a ProfilerStep#N (its launch call lies in the step's window): step, name, duration (ns).
WITH
-- @include recording
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur
  FROM slice s CROSS JOIN recording r
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
launched AS (
  SELECT p.gpu_id, l.name AS launch_name, l.ts AS launch_ns FROM launch p JOIN slice l ON l.id = p.launch_id
)
SELECT st.step, g.id AS gpu_id, g.name, g.cat AS category, g.ts AS start_ns, g.dur AS dur_ns,
  p.launch_name, p.launch_ns
FROM launched p
JOIN gpu_op g ON g.id = p.gpu_id
JOIN step st ON p.launch_ns >= st.ts AND p.launch_ns < st.ts + st.dur
ORDER BY g.ts, g.id
