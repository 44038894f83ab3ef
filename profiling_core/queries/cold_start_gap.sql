-- Per matmul_add region (the study's record_function) on the CPU: when it starts, its first child and its first aten:: op.
-- The gap from the region's start to its first aten:: op is the cold-start cost (workspace, heuristics, lazy loading).
WITH
-- @include recording
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, tt.utid
  FROM slice s CROSS JOIN recording r JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
region AS (
  SELECT s.id, s.ts, s.dur, s.depth, tt.utid FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name = 'matmul_add' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
inner_slice AS (
  SELECT r.id AS region_id, s.name, s.ts, s.depth - r.depth AS rel_depth,
    ROW_NUMBER() OVER (PARTITION BY r.id ORDER BY s.ts, s.depth) AS nth_any,
    ROW_NUMBER() OVER (PARTITION BY r.id, s.name GLOB 'aten::*' ORDER BY s.ts, s.depth) AS nth_same_kind
  FROM region r
  JOIN thread_track tt ON tt.utid = r.utid
  JOIN slice s ON s.track_id = tt.id
  WHERE s.id <> r.id AND s.ts >= r.ts AND s.ts + s.dur <= r.ts + r.dur AND s.depth > r.depth
)
SELECT
  (SELECT st.step FROM step st WHERE st.utid = r.utid AND r.ts >= st.ts AND r.ts < st.ts + st.dur) AS step,
  r.id AS region_id, r.ts AS region_start_ns, r.dur AS region_dur_ns,
  fc.name AS first_child, fc.ts AS first_child_start_ns,
  fa.name AS first_aten, fa.ts AS first_aten_start_ns
FROM region r
LEFT JOIN inner_slice fc ON fc.region_id = r.id AND fc.nth_any = 1
LEFT JOIN inner_slice fa ON fa.region_id = r.id AND fa.nth_same_kind = 1 AND fa.name GLOB 'aten::*'
ORDER BY r.ts
