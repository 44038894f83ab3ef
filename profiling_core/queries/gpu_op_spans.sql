-- Every GPU op (kernel, memcpy, memset) as an interval, whatever its track, and the trace's window (first to last event).
SELECT 'op' AS kind, id, ts, dur, lower(category) AS category FROM slice
WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
UNION ALL
SELECT 'window', NULL, MIN(ts), MAX(ts + dur), NULL FROM slice WHERE category IS NOT NULL AND category <> 'Trace'
