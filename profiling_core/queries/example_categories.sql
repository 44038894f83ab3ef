-- Example: how many slices of each category, and their total duration in µs.
SELECT category, COUNT(*) AS slices, SUM(dur) / 1000.0 AS total_us
FROM slice
GROUP BY category
ORDER BY total_us DESC
