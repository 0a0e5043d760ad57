"""The ``synthetic`` source: no files. The train workload keeps its seeded random batch resident on the device.

This is clsbench's default and the ceiling ``clsbench diagnose`` compares real pipelines against: no decoding, no
copy, no waiting. A cell without data settings uses it; there is nothing to open.
"""

from __future__ import annotations

from clsbench.core.data_settings import DataSettings
from clsbench.data.base import SOURCES


class SyntheticSource:
    name = "synthetic"

    def open(self, settings: DataSettings) -> None:
        """Nothing to read: the workload builds its batch itself (``WorkloadContext.make_images``)."""
        return None


SOURCES.register(SyntheticSource.name, SyntheticSource())
