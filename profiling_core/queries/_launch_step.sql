-- Fragment (not a query): the step slices whose window holds each launch call, as launch_step(launch_id, step_id,
-- step_ts). A call counts in the steps of its own process where that process has step slices (ranks' traces merged
-- into one file: each rank's steps overlap the others' in time), else in any step whose window holds it.
-- Needs CTEs step(step_id, ts, dur, upid) and launch(launch_id, ...) defined before it.
step_upid AS (
  SELECT DISTINCT coalesce(upid, -1) AS upid FROM step
),
launch_step AS (
  SELECT DISTINCT l.id AS launch_id, st.step_id, st.ts AS step_ts
  FROM (SELECT DISTINCT launch_id FROM launch) p JOIN slice l ON l.id = p.launch_id
  LEFT JOIN thread_track lt ON lt.id = l.track_id LEFT JOIN thread lth ON lth.utid = lt.utid
  JOIN step st ON l.ts >= st.ts AND l.ts < st.ts + st.dur
  WHERE coalesce(lth.upid, -1) = coalesce(st.upid, -1)
    OR coalesce(lth.upid, -1) NOT IN (SELECT upid FROM step_upid)
),
