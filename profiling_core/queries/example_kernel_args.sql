-- Example: the arguments (grid, block, registers, correlation...) of the first GPU kernel.
SELECT a.key, a.display_value
FROM args a
WHERE a.arg_set_id = (SELECT arg_set_id FROM slice WHERE lower(category) = 'kernel' ORDER BY ts LIMIT 1)
ORDER BY a.key
