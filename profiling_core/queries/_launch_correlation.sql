-- Fragment (not a query): launch calls (runtime calls whose name names a launch, copy or memset) and GPU ops
-- keyed by args.correlation, for GPU ops without a flow.
-- Needs CTEs gpu_op(id, arg_set_id, ...) and by_flow(launch_id, gpu_id) defined before it.
-- (DISTINCT keeps launch_corr a materialised, indexed table; CROSS JOIN scans gpu_corr first,
-- so launch_corr is never computed when every GPU op has a flow)
launch_corr AS (
  SELECT DISTINCT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM slice
  WHERE lower(category) IN ('cuda_runtime', 'cuda_driver', 'runtime') AND arg_set_id IS NOT NULL
    AND (lower(name) GLOB '*launch*' OR lower(name) GLOB '*memcpy*' OR lower(name) GLOB '*memset*')
),
gpu_corr AS (
  SELECT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM gpu_op
  WHERE arg_set_id IS NOT NULL AND id NOT IN (SELECT gpu_id FROM by_flow)
),
