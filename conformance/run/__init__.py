"""The run room: one case through the steps of spec/RUNNING.md section 4 (`execute`), a plan of
cases and generated families run in order (`suite`), and the pieces of the run loop that every
runner shares: `interrupts` (a signal stops the run after the unit in hand is in the report) and
`loop` (the partial report of an interrupted run, the verdict tables, the exit code).
"""
