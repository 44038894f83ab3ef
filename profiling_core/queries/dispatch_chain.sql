-- The slice tree of every ProfilerStep#N: the CPU slices inside it on its thread, then the GPU ops its launch calls produced
-- (each GPU op is a child of its launch call). Rows: step, step_slice_id (the step slice whose window holds the row:
-- each rank's step N is a slice of its own where ranks' traces were merged into one file), id, parent_id, depth below
-- the step, name, category, lane.
WITH
-- @include recording
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, s.depth, tt.utid
  FROM slice s CROSS JOIN recording r JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, name, category, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
cpu AS (
  SELECT st.step, st.step_id AS step_slice_id, s.id,
  CASE WHEN s.id = st.step_id THEN NULL ELSE s.parent_id END AS parent_id,
    s.depth - st.depth AS depth, s.name, s.category, s.ts,
    CASE WHEN s.id = st.step_id THEN st.dur ELSE s.dur END AS dur, 'cpu' AS lane
  FROM step st
  JOIN thread_track tt ON tt.utid = st.utid
  JOIN slice s ON s.track_id = tt.id
  WHERE s.id = st.step_id OR (s.ts >= st.ts AND s.ts + s.dur <= st.ts + st.dur)
)
SELECT step, step_slice_id, id, parent_id, depth, name, category, ts AS start_ns, dur AS dur_ns, lane FROM cpu
UNION ALL
SELECT c.step, c.step_slice_id, g.id, c.id, c.depth + 1, g.name, g.category, g.ts, g.dur, 'gpu'
FROM cpu c JOIN launch p ON p.launch_id = c.id JOIN gpu_op g ON g.id = p.gpu_id
ORDER BY 1, 10, 8, 5
