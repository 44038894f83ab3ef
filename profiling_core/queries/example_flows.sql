-- Example: which CPU calls are linked to which GPU ops by flow events, and how often.
SELECT so.name AS launch_call, si.name AS gpu_op, COUNT(*) AS n
FROM flow f
JOIN slice so ON so.id = f.slice_out
JOIN slice si ON si.id = f.slice_in
GROUP BY 1, 2
ORDER BY n DESC
