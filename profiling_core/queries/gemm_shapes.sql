-- Recorded input shapes (args "Input Dims", flattened by trace_processor as args.Input Dims[i][j]) of GEMM ops.
SELECT s.id, s.name, a.key, a.int_value
FROM slice s JOIN args a ON a.arg_set_id = s.arg_set_id
WHERE s.name IN ('aten::mm', 'aten::bmm', 'aten::addmm', 'aten::baddbmm', 'aten::matmul', 'aten::linear',
                 'aten::_scaled_mm', 'aten::_int_mm')
  AND a.flat_key = 'args.Input Dims'
ORDER BY s.id, a.key
