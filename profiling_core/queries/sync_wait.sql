-- Each device/stream/event synchronize call: its duration and how much of it the GPU was busy (union of GPU op intervals).
-- Where several processes launched GPU work (ranks' traces merged into one file), a call waits only for its own
-- process's: the ops another process launched are left out (an op without a launch call counts for every process).
WITH sync AS (
  SELECT s.id, s.name, s.ts, s.dur, t.upid FROM slice s
  LEFT JOIN thread_track tt ON tt.id = s.track_id LEFT JOIN thread t ON t.utid = tt.utid
  WHERE s.name IN ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize',
                   'cuCtxSynchronize', 'cuStreamSynchronize', 'cuEventSynchronize',
                   'hipDeviceSynchronize', 'hipStreamSynchronize', 'hipEventSynchronize')
),
gpu_op AS (
  SELECT id, ts, dur, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
op_proc AS (
  SELECT p.gpu_id, max(t.upid) AS upid FROM launch p JOIN slice l ON l.id = p.launch_id
  LEFT JOIN thread_track tt ON tt.id = l.track_id LEFT JOIN thread t ON t.utid = tt.utid
  GROUP BY p.gpu_id
),
-- (the pairs are read only where two or more processes made launch calls: launch_procs)
clipped AS (
  SELECT y.id AS sync_id, MAX(g.ts, y.ts) AS ts, MIN(g.ts + g.dur, y.ts + y.dur) AS end_ts, g.ts + g.dur AS op_end
  FROM sync y JOIN gpu_op g ON g.ts < y.ts + y.dur AND g.ts + g.dur > y.ts
  WHERE CASE WHEN (SELECT n FROM launch_procs) < 2 THEN 1
    ELSE coalesce((SELECT o.upid FROM op_proc o WHERE o.gpu_id = g.id), -1) IN (-1, coalesce(y.upid, -2)) END
),
prev AS (
  SELECT sync_id, ts, end_ts,
    MAX(end_ts) OVER (PARTITION BY sync_id ORDER BY ts, end_ts
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM clipped
),
island AS (
  SELECT sync_id, ts, end_ts,
    SUM(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END)
      OVER (PARTITION BY sync_id ORDER BY ts, end_ts ROWS UNBOUNDED PRECEDING) AS island
  FROM prev
),
busy AS (
  SELECT sync_id, SUM(e - b) AS busy_ns FROM (
    SELECT sync_id, island, MIN(ts) AS b, MAX(end_ts) AS e FROM island GROUP BY sync_id, island
  ) GROUP BY sync_id
),
counts AS (
  SELECT sync_id, COUNT(*) AS gpu_ops, MAX(op_end) AS last_gpu_end_ns FROM clipped GROUP BY sync_id
)
SELECT y.id, y.name, y.ts AS start_ns, y.dur AS dur_ns,
  coalesce(b.busy_ns, 0) AS gpu_busy_ns, coalesce(c.gpu_ops, 0) AS gpu_ops, c.last_gpu_end_ns
FROM sync y
LEFT JOIN busy b ON b.sync_id = y.id
LEFT JOIN counts c ON c.sync_id = y.id
ORDER BY y.ts
