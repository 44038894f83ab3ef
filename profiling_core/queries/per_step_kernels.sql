-- Each GPU op launched inside a ProfilerStep#N (its launch call lies in the step's window): step, name, duration (ns).
WITH step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts, s.dur
  FROM slice s
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
by_flow AS (
  SELECT f.slice_out AS launch_id, g.id AS gpu_id FROM flow f JOIN gpu_op g ON g.id = f.slice_in
),
-- @include launch_correlation
launch AS (
  SELECT launch_id, gpu_id FROM by_flow
  UNION
  SELECT l.id, g.id FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
)
SELECT st.step, g.id AS gpu_id, g.name, g.cat AS category, g.ts AS start_ns, g.dur AS dur_ns,
  l.name AS launch_name, l.ts AS launch_ns
FROM launch p
JOIN slice l ON l.id = p.launch_id
JOIN gpu_op g ON g.id = p.gpu_id
JOIN step st ON l.ts >= st.ts AND l.ts < st.ts + st.dur
ORDER BY g.ts, g.id
