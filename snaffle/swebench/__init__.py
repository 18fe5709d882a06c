"""SWE-bench on snaffle: instances, per-instance checkouts, the batch runner and the local grader."""
