-- Fragment (not a query): pairs each GPU op with the call that launched it, by the flow table, or by
-- args.correlation where a GPU op has no flow (2021-era traces). Needs a CTE gpu_op(id, arg_set_id, ...)
-- defined before it; defines by_flow, launch_corr, gpu_corr and launch(launch_id, gpu_id, paired_by:
-- 'flow' or 'correlation').
-- A GPU op that two or more flows end on keeps only the flows whose call's args.correlation is not another
-- one than its own (a kernel that starts before the one ahead of it on its stream has ended can have its flow
-- bound to that one); the op whose flow was dropped is then paired by correlation. So is an op whose flow starts
-- on a runtime call that launches nothing (its name names no launch, copy or memset: a zero-length
-- cudaFuncSetAttribute written at the microsecond its launch call starts took the flow). A flow that starts on a
-- [memory] event is dropped: the 2021 format writes its flows' starts and its memory events with an integer tid and
-- its calls with a string one, so the reader binds those flows to the memory events, which launch nothing.
by_flow AS (
  SELECT f.slice_out AS launch_id, g.id AS gpu_id, 'flow' AS paired_by FROM flow f JOIN gpu_op g ON g.id = f.slice_in
  JOIN slice c ON c.id = f.slice_out
  WHERE coalesce(c.name, '') <> '[memory]'
  AND NOT (lower(coalesce(c.category, '')) IN ('cuda_runtime', 'cuda_driver', 'runtime')
             AND lower(c.name) NOT GLOB '*launch*' AND lower(c.name) NOT GLOB '*memcpy*'
             AND lower(c.name) NOT GLOB '*memset*')
  AND (g.id NOT IN (SELECT slice_in FROM flow GROUP BY slice_in HAVING count(*) > 1)
    OR NOT EXISTS (
      SELECT 1 FROM slice l WHERE l.id = f.slice_out
        AND extract_arg(l.arg_set_id, 'args.correlation') IS NOT NULL
        AND extract_arg(g.arg_set_id, 'args.correlation') IS NOT NULL
        AND extract_arg(l.arg_set_id, 'args.correlation') != extract_arg(g.arg_set_id, 'args.correlation')))
),
-- @include launch_correlation
launch AS (
  SELECT launch_id, gpu_id, paired_by FROM by_flow
  UNION
  SELECT l.id, g.id, 'correlation' FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
),
