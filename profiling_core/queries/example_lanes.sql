-- Example: the lanes of the trace (process pid, thread tid) and how many slices each holds.
SELECT p.pid, p.name AS process, t.tid, t.name AS thread, COUNT(*) AS slices
FROM slice s
JOIN thread_track tt ON tt.id = s.track_id
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
GROUP BY p.pid, t.tid
ORDER BY slices DESC
