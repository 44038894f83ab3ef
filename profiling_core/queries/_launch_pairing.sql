-- Fragment (not a query): pairs each GPU op with the call that launched it, by the flow table, or by
-- args.correlation where a GPU op has no flow (2021-era traces). Needs a CTE gpu_op(id, arg_set_id, ...)
-- defined before it; defines by_flow, launch_corr, gpu_corr, launch_any, launch_proc, launch_pick and
-- launch(launch_id, gpu_id, paired_by: 'flow' or 'correlation').
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
launch_any AS (
  SELECT launch_id, gpu_id, paired_by FROM by_flow
  UNION
  SELECT l.id, g.id, 'correlation' FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
),
-- A GPU op is launched by one process. Where ranks' traces were merged into one file their correlation and flow ids
-- repeat, and an op matches calls of several processes: it keeps the calls of the process whose call started last
-- at or before the op started (it cannot start before its launch), else of the one whose call started first.
launch_proc AS (
  SELECT a.launch_id, a.gpu_id, a.paired_by, t.upid AS upid, c.ts AS lts, g.ts AS gts
  FROM launch_any a JOIN slice c ON c.id = a.launch_id JOIN slice g ON g.id = a.gpu_id
  LEFT JOIN thread_track tt ON tt.id = c.track_id LEFT JOIN thread t ON t.utid = tt.utid
),
launch_pick AS (
  SELECT x.gpu_id, coalesce(
    (SELECT p.upid FROM launch_proc p WHERE p.gpu_id = x.gpu_id AND p.lts <= p.gts ORDER BY p.lts DESC LIMIT 1),
    (SELECT p.upid FROM launch_proc p WHERE p.gpu_id = x.gpu_id ORDER BY p.lts LIMIT 1)) AS upid
  FROM launch_proc x GROUP BY x.gpu_id HAVING count(DISTINCT coalesce(x.upid, -1)) > 1
),
launch AS (
  SELECT p.launch_id, p.gpu_id, p.paired_by FROM launch_proc p LEFT JOIN launch_pick k ON k.gpu_id = p.gpu_id
  WHERE k.gpu_id IS NULL OR p.upid IS k.upid
),
