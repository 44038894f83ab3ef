-- Fragment (not a query): launch calls (runtime calls whose name names a launch, copy or memset) and GPU ops
-- keyed by args.correlation: the GPU ops without a flow, or every GPU op where several processes made launch calls
-- (ranks' traces merged into one file, whose ids repeat).
-- Needs CTEs gpu_op(id, arg_set_id, ...) and by_flow(launch_id, gpu_id) defined before it.
-- (DISTINCT keeps launch_corr a materialised, indexed table; CROSS JOIN scans gpu_corr first,
-- so launch_corr is never computed when every GPU op has a flow and one process made the launch calls)
launch_corr AS (
  SELECT DISTINCT s.id, extract_arg(s.arg_set_id, 'args.correlation') AS corr, coalesce(p.pid, -1) AS lp FROM slice s
  LEFT JOIN thread_track tt ON tt.id = s.track_id LEFT JOIN thread t ON t.utid = tt.utid
  LEFT JOIN process p ON p.upid = t.upid
  WHERE lower(s.category) IN ('cuda_runtime', 'cuda_driver', 'runtime') AND s.arg_set_id IS NOT NULL
    AND (lower(s.name) GLOB '*launch*' OR lower(s.name) GLOB '*memcpy*' OR lower(s.name) GLOB '*memset*')
),
launch_procs AS (
  SELECT count(DISTINCT t.upid) AS n FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  JOIN thread t ON t.utid = tt.utid
  WHERE lower(s.category) IN ('cuda_runtime', 'cuda_driver', 'runtime') AND s.arg_set_id IS NOT NULL
    AND (lower(s.name) GLOB '*launch*' OR lower(s.name) GLOB '*memcpy*' OR lower(s.name) GLOB '*memset*')
),
gpu_corr AS (
  SELECT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM gpu_op
  WHERE arg_set_id IS NOT NULL AND (id NOT IN (SELECT gpu_id FROM by_flow) OR (SELECT n FROM launch_procs) > 1)
),
