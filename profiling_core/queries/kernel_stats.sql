-- Per GPU kernel name over the whole trace: count, total, mean, min and max duration (ns).
SELECT name, COUNT(*) AS count, SUM(dur) AS total_ns, AVG(dur) AS mean_ns, MIN(dur) AS min_ns, MAX(dur) AS max_ns
FROM slice
WHERE lower(category) = 'kernel'
GROUP BY name
ORDER BY total_ns DESC, name
