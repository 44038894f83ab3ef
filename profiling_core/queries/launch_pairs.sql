-- Every launch call paired with the GPU op it launched (flow table, else args.correlation), with both ends' columns.
-- The analyses compute this once per trace and share it (steps, GPU busy, per-step kernels, launch latency, GEMMs).
WITH gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, category, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
by_flow AS (
  SELECT f.slice_out AS launch_id, g.id AS gpu_id, 'flow' AS paired_by FROM flow f JOIN gpu_op g ON g.id = f.slice_in
),
-- @include launch_correlation
launch AS (
  SELECT launch_id, gpu_id, paired_by FROM by_flow
  UNION
  SELECT l.id, g.id, 'correlation' FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
)
SELECT p.launch_id, p.gpu_id, p.paired_by, l.name AS launch_name, l.ts AS launch_ts, l.dur AS launch_dur,
  l.parent_id AS launch_parent_id, l.track_id AS launch_track_id, lt.utid AS launch_utid,
  g.name AS gpu_name, g.cat AS gpu_category, g.category AS gpu_category_raw, g.ts AS gpu_ts, g.dur AS gpu_dur
FROM launch p
JOIN slice l ON l.id = p.launch_id
JOIN gpu_op g ON g.id = p.gpu_id
LEFT JOIN thread_track lt ON lt.id = l.track_id
ORDER BY p.launch_id, p.gpu_id
