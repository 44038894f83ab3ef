-- Per ProfilerStep#N: torch.compile's CPU rows (cache lookup, compiled region, prologue, CompiledFxGraph hash) and GPU work.
-- CPU rows: TorchDynamo Cache Lookup, Torch-Compiled Region, AOTDispatcher Runtime Wrapper Prologue, ## Call CompiledFxGraph
-- <hash>, cudaGraphLaunch, on any thread (a training step's backward graph runs on the autograd engine's thread): each
-- counts with the first step (time order) whose window holds its start, as launch_latency's step; the GPU's
-- gpu_user_annotation copies are not CPU rows. backward_fx_graph_*: the FX graph calls inside a CompiledFunctionBackward
-- (the backward's graphs). GPU work launched in the step: kernels, memcpy by kind, memset, launch calls.
WITH RECURSIVE
-- @include recording
step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts,
    CASE WHEN s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur, tt.utid, t.upid
  FROM slice s CROSS JOIN recording r JOIN thread_track tt ON tt.id = s.track_id LEFT JOIN thread t ON t.utid = tt.utid
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
gpu_op AS (
  SELECT id, ts, dur, name, lower(category) AS cat, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
-- @include launch_step
compile_row AS (
  SELECT s.id, s.ts, s.dur, s.name, s.parent_id,
    (SELECT st.step_id FROM step st WHERE s.ts >= st.ts AND s.ts < st.ts + st.dur
     ORDER BY st.ts, st.step_id LIMIT 1) AS step_id
  FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE (s.name IN ('TorchDynamo Cache Lookup', 'AOTDispatcher Runtime Wrapper Prologue',
                    'cudaGraphLaunch', 'hipGraphLaunch', 'cuGraphLaunch')
         OR s.name GLOB 'Torch-Compiled Region*' OR s.name GLOB '## Call CompiledFxGraph *')
    AND s.category IS NOT NULL
    AND lower(s.category) NOT IN ('trace', 'kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset',
                                  'gpu_user_annotation', 'python_function', 'ac2g', 'flow')
),
-- each FX graph call's ancestors, up to the first CompiledFunctionBackward
fx_up (id, anc) AS (
  SELECT id, parent_id FROM compile_row WHERE name GLOB '## Call CompiledFxGraph *' AND parent_id IS NOT NULL
  UNION ALL
  SELECT f.id, a.parent_id FROM fx_up f JOIN slice a ON a.id = f.anc
  WHERE a.name IS NOT 'CompiledFunctionBackward' AND a.parent_id IS NOT NULL
),
backward_fx AS (
  SELECT DISTINCT f.id FROM fx_up f JOIN slice a ON a.id = f.anc WHERE a.name = 'CompiledFunctionBackward'
),
cpu AS (
  SELECT s.step_id,
    SUM(s.name = 'TorchDynamo Cache Lookup') AS cache_lookups,
    SUM(CASE WHEN s.name = 'TorchDynamo Cache Lookup' THEN s.dur ELSE 0 END) AS cache_lookup_ns,
    SUM(s.name GLOB 'Torch-Compiled Region*') AS compiled_regions,
    SUM(CASE WHEN s.name GLOB 'Torch-Compiled Region*' THEN s.dur ELSE 0 END) AS compiled_region_ns,
    SUM(s.name = 'AOTDispatcher Runtime Wrapper Prologue') AS prologues,
    SUM(CASE WHEN s.name = 'AOTDispatcher Runtime Wrapper Prologue' THEN s.dur ELSE 0 END) AS prologue_ns,
    SUM(s.name GLOB '## Call CompiledFxGraph *') AS fx_graph_calls,
    SUM(CASE WHEN s.name GLOB '## Call CompiledFxGraph *' THEN s.dur ELSE 0 END) AS fx_graph_ns,
    group_concat(DISTINCT CASE WHEN s.name GLOB '## Call CompiledFxGraph *'
      THEN trim(replace(substr(s.name, 25), '##', '')) END) AS fx_graph_hash,
    SUM(b.id IS NOT NULL) AS backward_fx_graph_calls,
    SUM(CASE WHEN b.id IS NOT NULL THEN s.dur ELSE 0 END) AS backward_fx_graph_ns,
    group_concat(DISTINCT CASE WHEN b.id IS NOT NULL
      THEN trim(replace(substr(s.name, 25), '##', '')) END) AS backward_fx_graph_hash,
    SUM(s.name IN ('cudaGraphLaunch', 'hipGraphLaunch', 'cuGraphLaunch')) AS graph_launches
  FROM compile_row s LEFT JOIN backward_fx b ON b.id = s.id
  WHERE s.step_id IS NOT NULL
  GROUP BY s.step_id
),
gpu AS (
  SELECT st.step_id,
    COUNT(DISTINCT CASE WHEN g.cat = 'kernel' THEN g.id END) AS kernels,
    COUNT(DISTINCT CASE WHEN g.cat IN ('gpu_memcpy', 'memcpy') THEN g.id END) AS memcpys,
    COUNT(DISTINCT CASE WHEN g.cat IN ('gpu_memcpy', 'memcpy') AND g.name GLOB 'Memcpy DtoD*' THEN g.id END) AS memcpy_dtod,
    COUNT(DISTINCT CASE WHEN g.cat IN ('gpu_memcpy', 'memcpy') AND g.name GLOB 'Memcpy HtoD*' THEN g.id END) AS memcpy_htod,
    COUNT(DISTINCT CASE WHEN g.cat IN ('gpu_memcpy', 'memcpy') AND g.name GLOB 'Memcpy DtoH*' THEN g.id END) AS memcpy_dtoh,
    COUNT(DISTINCT CASE WHEN g.cat IN ('gpu_memset', 'memset') THEN g.id END) AS memsets,
    COUNT(DISTINCT p.launch_id) AS launches,
    COUNT(DISTINCT CASE WHEN g.cat = 'kernel' THEN p.launch_id END) AS kernel_launches
  FROM step st
  JOIN launch_step ls ON ls.step_id = st.step_id
  JOIN launch p ON p.launch_id = ls.launch_id
  JOIN gpu_op g ON g.id = p.gpu_id
  GROUP BY st.step_id
)
SELECT st.step, st.ts AS start_ns, st.dur AS cpu_dur_ns,
  coalesce(c.cache_lookups, 0) AS cache_lookups, coalesce(c.cache_lookup_ns, 0) AS cache_lookup_ns,
  coalesce(c.compiled_regions, 0) AS compiled_regions, coalesce(c.compiled_region_ns, 0) AS compiled_region_ns,
  coalesce(c.prologues, 0) AS prologues, coalesce(c.prologue_ns, 0) AS prologue_ns,
  coalesce(c.fx_graph_calls, 0) AS fx_graph_calls, coalesce(c.fx_graph_ns, 0) AS fx_graph_ns, c.fx_graph_hash,
  coalesce(c.backward_fx_graph_calls, 0) AS backward_fx_graph_calls,
  coalesce(c.backward_fx_graph_ns, 0) AS backward_fx_graph_ns, c.backward_fx_graph_hash,
  coalesce(c.graph_launches, 0) AS graph_launches,
  coalesce(g.kernels, 0) AS kernels, coalesce(g.memcpys, 0) AS memcpys, coalesce(g.memcpy_dtod, 0) AS memcpy_dtod,
  coalesce(g.memcpy_htod, 0) AS memcpy_htod, coalesce(g.memcpy_dtoh, 0) AS memcpy_dtoh,
  coalesce(g.memsets, 0) AS memsets, coalesce(g.launches, 0) AS launches,
  coalesce(g.kernel_launches, 0) AS kernel_launches
FROM step st
LEFT JOIN cpu c ON c.step_id = st.step_id
LEFT JOIN gpu g ON g.step_id = st.step_id
ORDER BY st.ts
