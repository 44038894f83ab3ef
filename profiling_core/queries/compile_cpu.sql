-- Per ProfilerStep#N: torch.compile's CPU rows only (the CPU half of compile_breakdown; its GPU half comes from the
-- shared launch pairs). Steps in time order; the step's own window and thread.
WITH step AS (
  SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.ts, s.dur, tt.utid
  FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
),
cpu AS (
  SELECT st.step_id,
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
    SUM(s.name IN ('cudaGraphLaunch', 'hipGraphLaunch', 'cuGraphLaunch')) AS graph_launches
  FROM step st
  JOIN thread_track tt ON tt.utid = st.utid
  JOIN slice s ON s.track_id = tt.id
  WHERE s.ts >= st.ts AND s.ts < st.ts + st.dur
  GROUP BY st.step_id
)
SELECT st.step_id, st.step, st.ts AS start_ns, st.dur AS cpu_dur_ns,
  coalesce(c.cache_lookups, 0) AS cache_lookups, coalesce(c.cache_lookup_ns, 0) AS cache_lookup_ns,
  coalesce(c.compiled_regions, 0) AS compiled_regions, coalesce(c.compiled_region_ns, 0) AS compiled_region_ns,
  coalesce(c.prologues, 0) AS prologues, coalesce(c.prologue_ns, 0) AS prologue_ns,
  coalesce(c.fx_graph_calls, 0) AS fx_graph_calls, coalesce(c.fx_graph_ns, 0) AS fx_graph_ns, c.fx_graph_hash,
  coalesce(c.graph_launches, 0) AS graph_launches
FROM step st
LEFT JOIN cpu c ON c.step_id = st.step_id
ORDER BY st.ts, st.step_id
