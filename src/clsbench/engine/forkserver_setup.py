"""Imported first in the forkserver (:data:`clsbench.engine.executor.PRELOAD_MODULES`), for that purpose alone.

Ctrl-C in a terminal goes to the whole process group, the forkserver included. The run itself handles it (what
finished is saved, the workers are ended); the forkserver, busy importing torch in the first seconds, would only
print a traceback of those imports. So it ignores SIGINT, and so do the workers forked from it, whose lives the
run ends itself.
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
