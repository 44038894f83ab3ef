-- Fragment (not a query): pairs each GPU op with the call that launched it, by the flow table, or by
-- args.correlation where a GPU op has no flow (2021-era traces). Needs a CTE gpu_op(id, arg_set_id, ...)
-- defined before it; defines by_flow, launch_corr, launch_procs, gpu_corr, launch_any, launch_proc, launch_amb,
-- launch_call_k, launch_gpu_k, launch_pick and launch(launch_id, gpu_id, paired_by: 'flow' or 'correlation').
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
    AND (g.id NOT IN (SELECT gpu_id FROM by_flow)
      OR g.corr IN (SELECT corr FROM launch_corr GROUP BY corr HAVING count(DISTINCT lp) > 1))
    AND NOT EXISTS (SELECT 1 FROM by_flow b WHERE b.launch_id = l.id AND b.gpu_id = g.id)
),
-- A GPU (the process its ops are written under) is driven by one process. Where ranks' traces were merged into one
-- file their correlation ids repeat (each process counts its own from 1), and so do their flow ids, whose repeats
-- the reader binds to the first call that began them: an op then matches a call of each rank. Of the processes
-- whose calls such ops match, the GPU's ops keep the calls of the one that (1) has a call at or before the start of
-- the most of them (an op cannot start before its launch), then (2) most often holds the GPU's place in its
-- correlation id's group (the k-th process to make a call of that id, the k-th GPU to start an op of it: ranks
-- that run in step launch and run in the same order), then (3) has the lower pid. An op that matches calls of none of
-- the chosen one keeps its pairs; so does one that matches calls of one process only, unless its GPU's ops keep
-- another process's calls: that call is then another rank's whose id the op's own launch (before the recording, not
-- in the file) shared, and the op is left unpaired.
launch_proc AS (
  SELECT a.launch_id, a.gpu_id, a.paired_by, coalesce(p.pid, -1) AS lp, c.ts AS lts
  FROM launch_any a JOIN slice c ON c.id = a.launch_id
  LEFT JOIN thread_track tt ON tt.id = c.track_id LEFT JOIN thread t ON t.utid = tt.utid
  LEFT JOIN process p ON p.upid = t.upid
),
launch_amb AS (
  SELECT x.launch_id, x.gpu_id, x.paired_by, x.lp, x.lts, g.ts AS gts, coalesce(p.pid, -1) AS gp,
    coalesce(extract_arg(g.arg_set_id, 'args.correlation'), -1 - g.id) AS grp
  FROM launch_proc x JOIN slice g ON g.id = x.gpu_id
  LEFT JOIN thread_track tt ON tt.id = g.track_id LEFT JOIN thread t ON t.utid = tt.utid
  LEFT JOIN process p ON p.upid = t.upid
  WHERE x.gpu_id IN (SELECT gpu_id FROM launch_proc GROUP BY gpu_id HAVING count(DISTINCT lp) > 1)
),
launch_call_k AS (
  SELECT grp, lp, row_number() OVER (PARTITION BY grp ORDER BY t, lp) AS k
  FROM (SELECT grp, lp, min(lts) AS t FROM launch_amb GROUP BY grp, lp)
),
launch_gpu_k AS (
  SELECT grp, gp, row_number() OVER (PARTITION BY grp ORDER BY t, gp) AS k
  FROM (SELECT grp, gp, min(gts) AS t FROM launch_amb GROUP BY grp, gp)
),
launch_pick AS (
  SELECT gp, lp FROM (
    SELECT gp, lp, row_number() OVER (PARTITION BY gp ORDER BY causal DESC, placed DESC, lp) AS r FROM (
      SELECT a.gp, a.lp, count(DISTINCT CASE WHEN a.lts <= a.gts THEN a.gpu_id END) AS causal,
        count(DISTINCT CASE WHEN ck.k = gk.k THEN a.gpu_id END) AS placed
      FROM launch_amb a JOIN launch_call_k ck ON ck.grp = a.grp AND ck.lp = a.lp
      JOIN launch_gpu_k gk ON gk.grp = a.grp AND gk.gp = a.gp
      GROUP BY a.gp, a.lp))
  WHERE r = 1
),
launch AS (
  SELECT x.launch_id, x.gpu_id, x.paired_by FROM launch_proc x
  WHERE x.gpu_id NOT IN (SELECT gpu_id FROM launch_amb)
    AND NOT EXISTS (
      SELECT 1 FROM slice g LEFT JOIN thread_track tt ON tt.id = g.track_id LEFT JOIN thread t ON t.utid = tt.utid
      LEFT JOIN process p ON p.upid = t.upid JOIN launch_pick k ON k.gp = coalesce(p.pid, -1)
      WHERE g.id = x.gpu_id AND k.lp <> x.lp)
  UNION ALL
  SELECT a.launch_id, a.gpu_id, a.paired_by FROM launch_amb a JOIN launch_pick k ON k.gp = a.gp
  WHERE a.lp = k.lp OR NOT EXISTS (SELECT 1 FROM launch_amb q WHERE q.gpu_id = a.gpu_id AND q.lp = k.lp)
),
