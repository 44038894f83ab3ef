-- How each GPU op was launched: launch API, the CPU op the launch sits in (launch_op), and whether an occupancy query
-- precedes it. An occupancy query is a cudaOccupancy*/cuOccupancy*/hipOccupancy* call in the op a kernel's launch
-- call sits in (its nearest ancestor that is not a runtime call: a zero-length query can nest in a zero-length call),
-- started after the previous kernel launch call in that op and no later than this one: it sizes the kernel launch
-- that follows it (a memset of cuBLAS' workspace may come between). Copies and memsets count none.
-- from_compiled: launches from torch.compile's code, a call that is or lies under a Torch-Compiled Region, a
-- '## Call CompiledFxGraph' or a CompiledFunctionBackward (the op it sits in, then that op's ancestors).
WITH RECURSIVE gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
-- @include launch_op
query_up (id, ts, op_id) AS (  -- each query and its ancestors up to the first that is not a runtime call
  SELECT id, ts, parent_id FROM slice
  WHERE (name GLOB 'cudaOccupancy*' OR name GLOB 'hipOccupancy*' OR name GLOB 'cuOccupancy*')
    AND parent_id IS NOT NULL
  UNION ALL
  SELECT q.id, q.ts, s.parent_id FROM query_up q JOIN slice s ON s.id = q.op_id
  WHERE lower(coalesce(s.category, '')) IN ('cuda_runtime', 'cuda_driver', 'runtime') AND s.parent_id IS NOT NULL
),
occupancy AS (
  SELECT q.op_id AS parent_id, q.ts FROM query_up q JOIN slice s ON s.id = q.op_id
  WHERE lower(coalesce(s.category, '')) NOT IN ('cuda_runtime', 'cuda_driver', 'runtime')
),
calls AS (
  -- each kernel's launch call in an op, with the start of the previous kernel launch call in the same op
  SELECT id, ts, parent_id, LAG(ts) OVER (PARTITION BY parent_id ORDER BY ts, id) AS prev_ts
  FROM (SELECT DISTINCT id, ts, parent_id FROM (
          SELECT l.id, l.ts,
            CAST(coalesce(l.parent_id, (SELECT op_id FROM launch_op WHERE launch_id = l.id)) AS INT) AS parent_id
          FROM launch p JOIN slice l ON l.id = p.launch_id JOIN gpu_op g ON g.id = p.gpu_id WHERE g.cat = 'kernel')
        WHERE parent_id IS NOT NULL)
),
sized AS (
  SELECT DISTINCT c.id FROM calls c JOIN occupancy o ON o.parent_id = c.parent_id
  WHERE o.ts <= c.ts AND (c.prev_ts IS NULL OR o.ts > c.prev_ts)
),
launch_up (launch_id, anc) AS (  -- each launch call's op, then the op's ancestors, up to compiled code's slice
  SELECT DISTINCT l.id, CAST(coalesce(l.parent_id, (SELECT op_id FROM launch_op WHERE launch_id = l.id)) AS INT)
  FROM launch p JOIN slice l ON l.id = p.launch_id
  UNION ALL
  SELECT u.launch_id, s.parent_id FROM launch_up u JOIN slice s ON s.id = u.anc
  WHERE s.parent_id IS NOT NULL AND NOT (s.name GLOB 'Torch-Compiled Region*'
    OR s.name GLOB '## Call CompiledFxGraph *' OR s.name = 'CompiledFunctionBackward')
),
compiled AS (
  SELECT DISTINCT u.launch_id FROM launch_up u JOIN slice s ON s.id = u.anc
  WHERE s.name GLOB 'Torch-Compiled Region*' OR s.name GLOB '## Call CompiledFxGraph *'
    OR s.name = 'CompiledFunctionBackward'
),
path AS (
  SELECT g.name AS gpu_name, g.cat AS gpu_category, l.name AS launch_api, l.id AS launch_id,
    coalesce(par.name, '') AS parent_op,
    (g.cat = 'kernel' AND l.id IN (SELECT id FROM sized)) AS occupancy_before,
    (l.id IN (SELECT launch_id FROM compiled)) AS from_compiled
  FROM launch p
  JOIN slice l ON l.id = p.launch_id
  JOIN gpu_op g ON g.id = p.gpu_id
  LEFT JOIN slice par ON par.id = coalesce(l.parent_id, (SELECT op_id FROM launch_op WHERE launch_id = l.id))
)
SELECT gpu_name, gpu_category, launch_api, parent_op,
  COUNT(*) AS count, SUM(occupancy_before) AS with_occupancy_query, SUM(from_compiled) AS from_compiled
FROM path
GROUP BY gpu_name, gpu_category, launch_api, parent_op
ORDER BY gpu_name, launch_api, parent_op
