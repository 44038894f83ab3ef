-- Every GPU op (kernel, memcpy, memset) with its lane (device pid, stream tid), start and duration (ns), in time order.
SELECT s.id, s.name, lower(s.category) AS category, s.ts AS start_ns, s.dur AS dur_ns,
  p.pid AS device, t.tid AS stream
FROM slice s
JOIN thread_track tt ON tt.id = s.track_id
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
WHERE lower(s.category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
ORDER BY s.ts, s.id
