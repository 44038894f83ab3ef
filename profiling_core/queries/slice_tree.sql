-- Every slice with its place in the tree (parent_id, depth), its window, name, category and thread (utid; NULL off-thread).
SELECT s.id, s.ts, s.dur, s.track_id, s.parent_id, s.depth, s.name, s.category, tt.utid
FROM slice s LEFT JOIN thread_track tt ON tt.id = s.track_id
ORDER BY s.id
