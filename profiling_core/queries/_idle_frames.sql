-- Fragment: idle_frame(id, own_ns), the Python frames of threads that ran no Python code while the profile recorded.
-- torch writes such a thread's frames (held from the recording's start to its stop) on thread 0, which the readers put
-- on the process's main thread, nested by time alone with its slices. Each thread's frames open at the stop (ending
-- within 1 µs of its last frame's end) are its stack then; torch links a frame to its caller by their Python ids
-- (args "Python id", "Python parent id"). On a thread whose open frames each have an id of their own and form two
-- stacks or more, or on a thread numbered 0 (a trace whose process id is 0 keeps torch's thread 0 as a thread), a
-- stack whose frames called nothing that ended before the stop is an idle thread's. Its frame's own time: its
-- duration less its callees'. (analyses.table.idle_frames)
py_frame AS (
  SELECT s.id, s.dur, tt.utid, s.ts + s.dur >= MAX(s.ts + s.dur) OVER (PARTITION BY tt.utid) - 1000 AS held,
    extract_arg(s.arg_set_id, 'args.Python id') AS me, extract_arg(s.arg_set_id, 'args.Python parent id') AS up
  FROM slice s JOIN thread_track tt ON tt.id = s.track_id
  WHERE s.category = 'python_function'
),
py_stack (id, utid, me, root) AS (  -- the frames open at the stop, each with the outermost frame of its stack
  SELECT h.id, h.utid, h.me, h.id FROM py_frame h
  WHERE h.held AND NOT EXISTS (SELECT 1 FROM py_frame c WHERE c.held AND c.utid = h.utid AND c.me = h.up)
  UNION ALL
  SELECT h.id, h.utid, h.me, p.root FROM py_stack p JOIN py_frame h ON h.held AND h.utid = p.utid AND h.up = p.me
),
idle_frame AS (
  SELECT f.id, f.dur - coalesce((SELECT SUM(k.dur) FROM py_frame k WHERE k.utid = f.utid AND k.up = f.me), 0) AS own_ns
  FROM py_stack st JOIN py_frame f ON f.id = st.id
  WHERE st.utid IN (SELECT utid FROM py_frame WHERE held GROUP BY utid HAVING COUNT(DISTINCT me) = COUNT(*))
    AND (st.utid IN (SELECT utid FROM py_stack GROUP BY utid HAVING COUNT(DISTINCT root) >= 2)
         OR st.utid IN (SELECT utid FROM thread WHERE tid = 0))
    AND NOT EXISTS (SELECT 1 FROM py_stack m JOIN py_frame k ON NOT k.held AND k.utid = m.utid AND k.up = m.me
                    WHERE m.root = st.root)
),
