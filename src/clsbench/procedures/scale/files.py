"""Names of the files a launch's processes and the parent share in the launch's temporary folder.

Kept apart from :mod:`clsbench.procedures.scale.rank` so that importing the package never imports the module that
``python -m clsbench.procedures.scale.rank`` is about to run (runpy warns about that, rightly).
"""

from __future__ import annotations

JOB_FILE = "job.json"  # written by the parent: what to measure
PID_FILE = "pid-{rank}"  # written by each process first thing: how the parent finds it whatever happens
RANK_FILE = "rank-{rank}.json"  # each process's record
GATHERED_FILE = "gathered.json"  # rank 0's collection of every rank's record (the only one on several nodes)
LOG_FILE = "launch.log"  # the launcher's and the processes' output
