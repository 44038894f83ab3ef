-- How each GPU op was launched: launch API, the CPU op the launch sits in, and whether an occupancy query precedes it.
-- An occupancy query is a cudaOccupancy*/cuOccupancy*/hipOccupancy* call under the launch call's parent op, started
-- after the previous launch call under that op and no later than this one: it sizes the launch that follows it.
WITH gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
occupancy AS (
  SELECT parent_id, ts FROM slice
  WHERE (name GLOB 'cudaOccupancy*' OR name GLOB 'hipOccupancy*' OR name GLOB 'cuOccupancy*')
    AND parent_id IS NOT NULL
),
calls AS (
  -- each launch call under a parent op, with the start of the previous launch call under the same op
  SELECT id, ts, parent_id, LAG(ts) OVER (PARTITION BY parent_id ORDER BY ts, id) AS prev_ts
  FROM (SELECT DISTINCT l.id, l.ts, l.parent_id FROM launch p JOIN slice l ON l.id = p.launch_id
        WHERE l.parent_id IS NOT NULL)
),
sized AS (
  SELECT DISTINCT c.id FROM calls c JOIN occupancy o ON o.parent_id = c.parent_id
  WHERE o.ts <= c.ts AND (c.prev_ts IS NULL OR o.ts > c.prev_ts)
),
path AS (
  SELECT g.name AS gpu_name, g.cat AS gpu_category, l.name AS launch_api, l.id AS launch_id,
    coalesce(par.name, '') AS parent_op,
    (l.id IN (SELECT id FROM sized)) AS occupancy_before
  FROM launch p
  JOIN slice l ON l.id = p.launch_id
  JOIN gpu_op g ON g.id = p.gpu_id
  LEFT JOIN slice par ON par.id = l.parent_id
)
SELECT gpu_name, gpu_category, launch_api, parent_op,
  COUNT(*) AS count, SUM(occupancy_before) AS with_occupancy_query
FROM path
GROUP BY gpu_name, gpu_category, launch_api, parent_op
ORDER BY gpu_name, launch_api, parent_op
