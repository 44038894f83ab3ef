-- GEMM ops on the CPU (aten::mm, bmm, addmm, baddbmm, matmul, linear) with the GPU kernel time they launched (ns).
WITH gpu_op AS (
  SELECT id, ts, dur, name, arg_set_id FROM slice WHERE lower(category) = 'kernel'
),
by_flow AS (
  SELECT f.slice_out AS launch_id, g.id AS gpu_id FROM flow f JOIN gpu_op g ON g.id = f.slice_in
),
-- (DISTINCT keeps launch_corr a materialised, indexed table; CROSS JOIN scans gpu_corr first,
-- so launch_corr is never computed when every GPU op has a flow)
launch_corr AS (
  SELECT DISTINCT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM slice
  WHERE lower(category) IN ('cuda_runtime', 'cuda_driver', 'runtime') AND arg_set_id IS NOT NULL
),
gpu_corr AS (
  SELECT id, extract_arg(arg_set_id, 'args.correlation') AS corr FROM gpu_op
  WHERE arg_set_id IS NOT NULL AND id NOT IN (SELECT gpu_id FROM by_flow)
),
launch AS (
  SELECT launch_id, gpu_id FROM by_flow
  UNION
  SELECT l.id, g.id FROM gpu_corr g CROSS JOIN launch_corr l ON l.corr = g.corr WHERE g.corr IS NOT NULL
),
gemm AS (
  SELECT s.id, s.name, s.ts, s.dur, s.arg_set_id, tt.utid FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name IN ('aten::mm', 'aten::bmm', 'aten::addmm', 'aten::baddbmm', 'aten::matmul', 'aten::linear')
    AND coalesce(s.category, '') <> 'gpu_user_annotation'
)
SELECT m.id, m.name, m.ts AS start_ns, m.dur AS cpu_dur_ns, m.arg_set_id,
  (SELECT COUNT(*) FROM gemm c WHERE c.utid = m.utid AND c.id <> m.id
     AND c.ts >= m.ts AND c.ts + c.dur <= m.ts + m.dur) AS inner_gemms,
  (SELECT SUM(g.dur) FROM launch p JOIN slice l ON l.id = p.launch_id JOIN gpu_op g ON g.id = p.gpu_id
     JOIN thread_track lt ON lt.id = l.track_id
     WHERE lt.utid = m.utid AND l.ts >= m.ts AND l.ts < m.ts + m.dur) AS kernel_ns,
  (SELECT group_concat(DISTINCT g.name) FROM launch p JOIN slice l ON l.id = p.launch_id JOIN gpu_op g ON g.id = p.gpu_id
     JOIN thread_track lt ON lt.id = l.track_id
     WHERE lt.utid = m.utid AND l.ts >= m.ts AND l.ts < m.ts + m.dur) AS kernel_names
FROM gemm m
ORDER BY m.ts
