"""The job scheduler: pure Python, shared by the live dispatcher and the trace replayer."""
