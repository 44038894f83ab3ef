-- Every device/stream/event synchronize call (CUDA runtime and driver, HIP) with its window, in time order.
SELECT id, name, ts, dur FROM slice
WHERE name IN ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize',
               'cuCtxSynchronize', 'cuStreamSynchronize', 'cuEventSynchronize',
               'hipDeviceSynchronize', 'hipStreamSynchronize', 'hipEventSynchronize')
ORDER BY ts, id
