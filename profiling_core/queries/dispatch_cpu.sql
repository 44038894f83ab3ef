-- The CPU half of dispatch_chain: every slice inside each ProfilerStep#N on its thread, its step slice and depth.
-- (The GPU ops its launches produced come from the shared launch pairs.)
WITH
-- @include recording
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, s.depth, tt.utid
  FROM slice s CROSS JOIN recording r JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
)
SELECT st.step, st.step_id AS step_slice_id, s.id,
  CASE WHEN s.id = st.step_id THEN NULL ELSE s.parent_id END AS parent_id,
  s.depth - st.depth AS depth, s.name, s.category, s.ts AS start_ns,
  CASE WHEN s.id = st.step_id THEN st.dur ELSE s.dur END AS dur_ns, s.track_id
FROM step st
JOIN thread_track tt ON tt.utid = st.utid
JOIN slice s ON s.track_id = tt.id
WHERE s.id = st.step_id OR (s.ts >= st.ts AND s.ts + s.dur <= st.ts + st.dur)
ORDER BY st.step, s.ts, depth, s.track_id, s.id
