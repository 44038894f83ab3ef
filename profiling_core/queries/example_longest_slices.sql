-- Example: the 20 longest slices with their thread (tid) and process (pid).
SELECT s.name, s.category, s.dur / 1000.0 AS dur_us, t.tid, p.pid
FROM slice s
JOIN thread_track tt ON tt.id = s.track_id
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
ORDER BY s.dur DESC
LIMIT 20
