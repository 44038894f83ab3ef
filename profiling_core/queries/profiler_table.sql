-- The profiler table (key_averages) rebuilt from the trace: per name and lane, calls, self/total CPU and device time (ns).
-- Python frames (python_function, recorded with with_stack=True) are rows, as in torch's table.
-- CPU rows: self = duration minus the durations of its child slices (of a step cut at the recording's end, their time
-- inside the cut; a slice of a thread's spill track, one that
-- could not nest where it overlapped a slice without enclosing it: minus the union of its children and the time spent
-- in its window by the outermost slices of its thread's first track that do not enclose it; what that leaves of its
-- window is taken out of the self time of the innermost first-track slice around it, unless that one also encloses
-- the spill slice it is inside; a CPU slice written on no thread, on thread 0 (Kineto's pid -1 / tid 0: the
-- profiler's own work, its "Activity Buffer Request" say), but a Python frame, is a spill slice of the thread of the
-- innermost CPU slice (latest start, then shortest, then lowest id) of a thread not numbered 0 that encloses it, as
-- torch's own table nests it there; an idle thread's Python frame (the idle_frames fragment) is on a thread of its
-- own: self = duration minus its callees', and the slices nested in it take the nearest other ancestor as parent);
-- device time of a CPU op = GPU ops whose launch call
-- sits in that op (self: its parent, or the slice enclosing a call that could not nest, the launch_op fragment) or in
-- a descendant of it (total; a launch call itself gets none, as in torch's table).
-- GPU rows (kernels, memcpy, memset, gpu_user_annotation) carry their own duration as device time. ProfilerStep#N rows are merged into ProfilerStep*.
WITH RECURSIVE
-- @include recording
gpu_op AS (
  SELECT id, ts, dur, arg_set_id FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
),
-- @include launch_pairing
-- @include launch_op
launched AS (
  SELECT l.id AS launch_id,
    CAST(coalesce(l.parent_id, (SELECT op_id FROM launch_op WHERE launch_id = l.id)) AS INT) AS parent_id, l.ts,
    tt.utid, g.dur AS gpu_dur
  FROM launch p JOIN slice l ON l.id = p.launch_id JOIN gpu_op g ON g.id = p.gpu_id
  JOIN thread_track tt ON tt.id = l.track_id
),
cpu AS (  -- a step slice's dur cut at the recording's end (the recording fragment)
  SELECT s.id, s.name, s.ts,
    CASE WHEN s.name GLOB 'ProfilerStep#*' AND s.ts + s.dur > r.end_ts THEN MAX(0, r.end_ts - s.ts) ELSE s.dur END AS dur,
    tt.utid, s.category = 'python_function' AS frame
  FROM slice s CROSS JOIN recording r JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.category IS NOT NULL
    AND lower(s.category) NOT IN ('trace', 'kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset',
                                  'gpu_user_annotation', 'ac2g', 'flow', 'cuda_sync')
),
-- @include idle_frames
idle AS (
  SELECT id, own_ns FROM idle_frame
),
bypass (id, p) AS (  -- a slice the readers nested in an idle thread's frame: up past those frames
  SELECT s.id, f.parent_id FROM idle i JOIN slice s ON s.parent_id = i.id JOIN slice f ON f.id = i.id
  WHERE s.id NOT IN (SELECT id FROM idle)
  UNION ALL
  SELECT b.id, f.parent_id FROM bypass b JOIN slice f ON f.id = b.p WHERE b.p IN (SELECT id FROM idle)
),
reparent AS (  -- those slices, with their parent for the own-time rule: the nearest ancestor that is not such a frame
  SELECT id, p AS parent_id FROM bypass WHERE p IS NULL OR p NOT IN (SELECT id FROM idle)
),
child AS (  -- a step cut at the recording's end: its children count inside the cut only
  SELECT k.parent_id AS id,
    SUM(CASE WHEN c.dur < p.dur THEN MAX(0, MIN(k.ts + k.dur, c.ts + c.dur) - MAX(k.ts, c.ts)) ELSE k.dur END)
      AS child_ns
  FROM (
    SELECT parent_id, ts, dur FROM slice
    WHERE parent_id IS NOT NULL AND parent_id NOT IN (SELECT id FROM idle)
      AND id NOT IN (SELECT id FROM idle)
    UNION ALL
    SELECT r.parent_id, s.ts, s.dur FROM reparent r JOIN slice s ON s.id = r.id WHERE r.parent_id IS NOT NULL) k
  JOIN cpu c ON c.id = k.parent_id JOIN slice p ON p.id = k.parent_id
  GROUP BY k.parent_id
),
host AS (  -- each CPU slice's thread for the own-time rule: a slice of thread 0 (not a Python frame) takes the
           -- thread around it; an idle thread's frame has none
  SELECT c.id, coalesce(CASE WHEN th.tid = 0 AND NOT c.frame THEN
    (SELECT h.utid FROM cpu h JOIN thread t2 ON t2.utid = h.utid
     WHERE t2.tid <> 0 AND h.ts <= c.ts AND h.ts + h.dur >= c.ts + c.dur
     ORDER BY h.ts DESC, h.dur, h.id LIMIT 1) END, c.utid) AS utid
  FROM cpu c JOIN thread th ON th.utid = c.utid
  WHERE c.id NOT IN (SELECT id FROM idle)
),
first_track AS (  -- each thread's first track: the one of its earliest slice (lowest id among the earliest; an idle
                  -- thread's frame included: the readers' track)
  SELECT t.utid, (SELECT s2.track_id FROM slice s2 JOIN thread_track t2 ON t2.id = s2.track_id
                  WHERE t2.utid = t.utid ORDER BY s2.ts, s2.id LIMIT 1) AS track_id
  FROM (SELECT DISTINCT utid FROM thread_track) t
),
spill AS (  -- the CPU slices of a thread's spill track (any track but its first)
  SELECT c.id, c.ts, c.dur, f.track_id AS first_track,
    CAST(CASE WHEN cs.parent_id IN (SELECT id FROM idle) THEN (SELECT r.parent_id FROM reparent r
      WHERE r.id = c.id) ELSE cs.parent_id END AS INT) AS parent_id
  FROM cpu c JOIN host hu ON hu.id = c.id JOIN slice cs ON cs.id = c.id JOIN first_track f ON f.utid = hu.utid
  WHERE cs.track_id <> f.track_id
),
outer_of AS (  -- per spill slice, the outermost first-track slices below what encloses it, clipped to its window
  SELECT sp.id, MAX(o.ts, sp.ts) AS b, MIN(o.ts + o.dur, sp.ts + sp.dur) AS e
  FROM spill sp JOIN slice o ON o.track_id = sp.first_track AND o.ts < sp.ts + sp.dur AND o.ts + o.dur > sp.ts
    AND NOT (o.ts <= sp.ts AND o.ts + o.dur >= sp.ts + sp.dur)
  LEFT JOIN reparent ro ON ro.id = o.id
  LEFT JOIN slice op ON op.id = CAST(CASE WHEN ro.id IS NULL THEN o.parent_id ELSE ro.parent_id END AS INT)
  WHERE o.id NOT IN (SELECT id FROM idle) AND (op.id IS NULL OR (op.ts <= sp.ts AND op.ts + op.dur >= sp.ts + sp.dur))
),
cover AS (  -- those, and the spill slice's own children, in its window
  SELECT id, b, e FROM outer_of
  UNION ALL
  SELECT sp.id, MIN(MAX(k.ts, sp.ts), sp.ts + sp.dur), MIN(k.ts + k.dur, sp.ts + sp.dur)
  FROM spill sp JOIN slice k ON k.parent_id = sp.id
  UNION ALL
  SELECT sp.id, MIN(MAX(k.ts, sp.ts), sp.ts + sp.dur), MIN(k.ts + k.dur, sp.ts + sp.dur)
  FROM spill sp JOIN reparent r ON r.parent_id = sp.id JOIN slice k ON k.id = r.id
),
cover_ordered AS (
  SELECT id, b, e,
    MAX(e) OVER (PARTITION BY id ORDER BY b, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
  FROM cover
),
spilled AS (  -- the union of the cover, per spill slice
  SELECT id, SUM(MAX(0, e - MAX(b, coalesce(prev_e, b)))) AS other_ns FROM cover_ordered GROUP BY id
),
encloser AS (  -- each spill slice's innermost first-track encloser
  SELECT sp.id, sp.parent_id, sp.dur, (SELECT o.id FROM slice o WHERE o.track_id = sp.first_track
    AND o.ts <= sp.ts AND o.ts + o.dur >= sp.ts + sp.dur AND o.id NOT IN (SELECT id FROM idle)
    ORDER BY o.depth DESC, o.id LIMIT 1) AS enc
  FROM spill sp
),
handing AS (  -- a spill slice's window, less the slices below, leaves the own time of its innermost first-track
              -- encloser (unless that one encloses the spill slice it is inside, which handed the window over already)
  SELECT e.enc, e.id FROM encloser e
  WHERE e.enc IS NOT NULL AND NOT EXISTS (SELECT 1 FROM encloser pe WHERE pe.id = e.parent_id AND pe.enc = e.enc)
),
handed_windows AS (  -- per encloser, the windows handed to it, and the slices below in them; each counted once as
                     -- a union: spill slices that overlap each other (ranges left out of order) share their time
  SELECT h.enc AS id, sp.ts AS b, sp.ts + sp.dur AS e,
    MAX(sp.ts + sp.dur) OVER (PARTITION BY h.enc ORDER BY sp.ts, sp.ts + sp.dur
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
  FROM handing h JOIN spill sp ON sp.id = h.id
),
handed_below AS (
  SELECT h.enc AS id, o.b, o.e,
    MAX(o.e) OVER (PARTITION BY h.enc ORDER BY o.b, o.e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
  FROM handing h JOIN outer_of o ON o.id = h.id
),
handed_by AS (
  SELECT w.id, w.ns - coalesce(bl.ns, 0) AS ns
  FROM (SELECT id, SUM(MAX(0, e - MAX(b, coalesce(prev_e, b)))) AS ns FROM handed_windows GROUP BY id) w
  LEFT JOIN (SELECT id, SUM(MAX(0, e - MAX(b, coalesce(prev_e, b)))) AS ns FROM handed_below GROUP BY id) bl
    ON bl.id = w.id
),
self_dev AS (
  SELECT parent_id AS id, SUM(gpu_dur) AS ns FROM launched WHERE parent_id IS NOT NULL GROUP BY parent_id
),
-- every ancestor of a launch call (parent_id chain) gets the launched GPU time in its total
ancestor (id, gpu_dur) AS (
  SELECT parent_id, gpu_dur FROM launched WHERE parent_id IS NOT NULL
  UNION ALL
  SELECT CAST(coalesce(r.parent_id, CASE WHEN r.id IS NULL THEN s.parent_id END) AS INT), a.gpu_dur
  FROM ancestor a JOIN slice s ON s.id = a.id LEFT JOIN reparent r ON r.id = s.id
  WHERE coalesce(r.parent_id, CASE WHEN r.id IS NULL THEN s.parent_id END) IS NOT NULL
),
total_dev AS (
  SELECT id, SUM(gpu_dur) AS ns FROM ancestor GROUP BY id
),
cpu_rows AS (
  SELECT CASE WHEN c.name GLOB 'ProfilerStep#*' THEN 'ProfilerStep*' ELSE c.name END AS name, 'cpu' AS lane,
    coalesce(idl.own_ns, c.dur - coalesce(sp.other_ns, ch.child_ns, 0) - coalesce(hb.ns, 0)) AS self_cpu_ns,
    c.dur AS cpu_total_ns,
    coalesce(sd.ns, 0) AS self_device_ns, coalesce(td.ns, 0) AS device_total_ns
  FROM cpu c
  LEFT JOIN idle idl ON idl.id = c.id
  LEFT JOIN child ch ON ch.id = c.id
  LEFT JOIN spilled sp ON sp.id = c.id
  LEFT JOIN handed_by hb ON hb.id = c.id
  LEFT JOIN self_dev sd ON sd.id = c.id
  LEFT JOIN total_dev td ON td.id = c.id
),
gpu_rows AS (
  SELECT CASE WHEN name GLOB 'ProfilerStep#*' THEN 'ProfilerStep*' ELSE name END AS name, 'gpu' AS lane,
    0 AS self_cpu_ns, 0 AS cpu_total_ns, dur AS self_device_ns, dur AS device_total_ns
  FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset', 'gpu_user_annotation')
)
SELECT name, lane, COUNT(*) AS calls,
  SUM(self_cpu_ns) AS self_cpu_ns, SUM(cpu_total_ns) AS cpu_total_ns,
  SUM(self_device_ns) AS self_device_ns, SUM(device_total_ns) AS device_total_ns
FROM (SELECT * FROM cpu_rows UNION ALL SELECT * FROM gpu_rows)
GROUP BY name, lane
ORDER BY self_device_ns DESC, self_cpu_ns DESC, name
