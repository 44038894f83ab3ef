-- GEMM ops on the CPU (aten::mm, bmm, addmm, baddbmm, matmul, linear) with their thread (utid), in time order.
SELECT s.id, s.name, s.ts AS start_ns, s.dur AS cpu_dur_ns, s.arg_set_id, tt.utid
FROM slice s JOIN thread_track tt ON tt.id = s.track_id
WHERE s.name IN ('aten::mm', 'aten::bmm', 'aten::addmm', 'aten::baddbmm', 'aten::matmul', 'aten::linear')
  AND coalesce(s.category, '') <> 'gpu_user_annotation'
ORDER BY s.ts, s.id
