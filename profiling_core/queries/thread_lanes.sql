-- Every thread (utid) with its tid and its process's pid (GPU lanes: tid = stream, pid = device).
SELECT t.utid, t.tid, p.pid FROM thread t LEFT JOIN process p USING (upid) ORDER BY t.utid
