-- Every flow row's two ends (slice_out: e.g. the launch call; slice_in: e.g. the GPU op it launched).
SELECT slice_out, slice_in FROM flow
