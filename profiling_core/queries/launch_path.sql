-- How each GPU op was launched: launch API, the CPU op the launch sits in, and whether an occupancy query precedes it.
-- An occupancy query is a cudaOccupancy*/cuOccupancy*/hipOccupancy* call before the launch under the same parent op.
WITH gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
occupancy AS (
  -- the earliest occupancy query under each parent (one row per parent, so the join below is a lookup)
  SELECT parent_id, MIN(ts) AS first_ts FROM slice
  WHERE (name GLOB 'cudaOccupancy*' OR name GLOB 'hipOccupancy*' OR name GLOB 'cuOccupancy*')
    AND parent_id IS NOT NULL
  GROUP BY parent_id
),
path AS (
  SELECT g.name AS gpu_name, g.cat AS gpu_category, l.name AS launch_api, l.id AS launch_id,
    coalesce(par.name, '') AS parent_op,
    coalesce(o.first_ts <= l.ts, 0) AS occupancy_before
  FROM launch p
  JOIN slice l ON l.id = p.launch_id
  JOIN gpu_op g ON g.id = p.gpu_id
  LEFT JOIN slice par ON par.id = l.parent_id
  LEFT JOIN occupancy o ON o.parent_id = l.parent_id
)
SELECT gpu_name, gpu_category, launch_api, parent_op,
  COUNT(*) AS count, SUM(occupancy_before) AS with_occupancy_query
FROM path
GROUP BY gpu_name, gpu_category, launch_api, parent_op
ORDER BY gpu_name, launch_api, parent_op
