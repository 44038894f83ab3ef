-- Every ProfilerStep#N slice (CPU side; gpu_user_annotation copies left out) with its N, window and thread (utid).
SELECT s.id AS step_id, CAST(substr(s.name, 14) AS INT) AS step, s.name, s.ts, s.dur, s.depth, tt.utid
FROM slice s LEFT JOIN thread_track tt ON tt.id = s.track_id
WHERE s.name GLOB 'ProfilerStep#*' AND coalesce(s.category, '') <> 'gpu_user_annotation'
ORDER BY s.ts, s.id
