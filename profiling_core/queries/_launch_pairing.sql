-- Fragment (not a query): pairs each GPU op with the call that launched it, by the flow table, or by
-- args.correlation where a GPU op has no flow (2021-era traces). Needs a CTE gpu_op(id, arg_set_id, ...)
-- defined before it; defines by_flow, launch_corr, gpu_corr and launch(launch_id, gpu_id).
by_flow AS (
  SELECT f.slice_out AS launch_id, g.id AS gpu_id FROM flow f JOIN gpu_op g ON g.id = f.slice_in
),
-- @include launch_correlation
launch AS (
  SELECT launch_id, gpu_id FROM by_flow
  UNION
  SELECT l.id, g.id FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
),
