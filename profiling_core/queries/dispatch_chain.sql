-- The slice tree of every ProfilerStep#N: the CPU slices inside it on its thread, then the GPU ops its launch calls produced
-- (each GPU op is a child of its launch call). Rows: step, id, parent_id, depth below the step, name, category, lane.
WITH step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts, s.dur, s.depth, tt.utid
  FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, name, category, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
by_flow AS (
  SELECT f.slice_out AS launch_id, g.id AS gpu_id FROM flow f JOIN gpu_op g ON g.id = f.slice_in
),
-- (DISTINCT keeps launch_corr a materialised, indexed table; CROSS JOIN scans gpu_corr first,
-- so launch_corr is never computed when every GPU op has a flow)
launch_corr AS (
  SELECT DISTINCT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM slice
  WHERE lower(category) IN ('cuda_runtime', 'cuda_driver', 'runtime') AND arg_set_id IS NOT NULL
),
gpu_corr AS (
  SELECT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM gpu_op
  WHERE arg_set_id IS NOT NULL AND id NOT IN (SELECT gpu_id FROM by_flow)
),
launch AS (
  SELECT launch_id, gpu_id FROM by_flow
  UNION
  SELECT l.id, g.id FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
),
cpu AS (
  SELECT st.step, s.id, CASE WHEN s.id = st.step_id THEN NULL ELSE s.parent_id END AS parent_id,
    s.depth - st.depth AS depth, s.name, s.category, s.ts, s.dur, 'cpu' AS lane
  FROM step st
  JOIN thread_track tt ON tt.utid = st.utid
  JOIN slice s ON s.track_id = tt.id
  WHERE s.ts >= st.ts AND s.ts + s.dur <= st.ts + st.dur
)
SELECT step, id, parent_id, depth, name, category, ts AS start_ns, dur AS dur_ns, lane FROM cpu
UNION ALL
SELECT c.step, g.id, c.id, c.depth + 1, g.name, g.category, g.ts, g.dur, 'gpu'
FROM cpu c JOIN launch p ON p.launch_id = c.id JOIN gpu_op g ON g.id = p.gpu_id
ORDER BY 1, 9, 7, 4
