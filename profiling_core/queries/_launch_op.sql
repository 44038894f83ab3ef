-- Fragment (not a query): where a launch call that has no parent sits. Needs the CTE launch(launch_id, ...) defined
-- before it; defines launch_op(launch_id, op_id). A call the reader could not nest (it starts inside a slice and
-- ends after it) lies at depth 0 on another track of its thread, with no parent: it sits in the innermost slice of
-- its thread's other tracks that encloses it (the latest start, then the shortest, then the first; NULL for none).
-- A call's op is then CAST(coalesce(parent_id, (SELECT op_id FROM launch_op WHERE launch_id = id)) AS INT) (the CAST
-- gives it an integer affinity, so SQLite can index what joins on it).
launch_op AS (
  SELECT DISTINCT l.id AS launch_id, (
    SELECT o.id FROM slice o JOIN thread_track ot ON ot.id = o.track_id
    WHERE ot.utid = lt.utid AND o.track_id <> l.track_id AND o.ts <= l.ts AND o.ts + o.dur >= l.ts + l.dur
    ORDER BY o.ts DESC, o.dur, o.id LIMIT 1) AS op_id
  FROM launch x JOIN slice l ON l.id = x.launch_id JOIN thread_track lt ON lt.id = l.track_id
  WHERE l.parent_id IS NULL
),
