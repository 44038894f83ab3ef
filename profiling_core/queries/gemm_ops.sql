-- GEMM ops on the CPU (aten::mm, bmm, addmm, baddbmm, matmul, linear, _scaled_mm, _int_mm: gemm.py's GEMM_OPS)
-- with the GPU kernel time they launched (ns).
WITH gpu_op AS (
  SELECT id, ts, dur, name, arg_set_id FROM slice WHERE lower(category) = 'kernel'
),
-- @include launch_pairing
gemm AS (
  SELECT s.id, s.name, s.ts, s.dur, s.arg_set_id, tt.utid FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.name IN ('aten::mm', 'aten::bmm', 'aten::addmm', 'aten::baddbmm', 'aten::matmul', 'aten::linear',
                   'aten::_scaled_mm', 'aten::_int_mm')
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
