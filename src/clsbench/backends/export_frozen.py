"""``export-frozen``: the ``export`` backend (torch.export + AOTInductor, :mod:`clsbench.backends.export`) built with
Inductor's freezing, the way an inference deployment that never changes its weights builds a package.

Freezing treats the weights as constants while Inductor compiles: BatchNorm folds into the convolution before it,
constant subexpressions fold, and the weights may be laid out afresh for the kernels chosen (on a CPU, oneDNN's
prepacked weights). The package holds the folded weights, so new weights mean a new build; plain ``export`` keeps
them as they are. This is ``+compile+freeze`` (:mod:`clsbench.modes.freeze`) for an exported artifact, where the
``+freeze`` modifier cannot go: it belongs to ``torch.compile``, which no artifact backend takes.

Measured with ``clsbench run`` on a 2-core CPU VM (ResNet-18, fp32, batch 8 at 64x64, 3 fresh processes each,
``benchmarks/results/cpu/backends-export-frozen-resnet18.json``): 583 img/s frozen (spread 22%, UNSTABLE on that
shared host) against 265 for plain ``export`` and 447 for eager, outputs within 1.1e-6 of fp32 eager. On the H200
freezing gained 13% for ``torch.compile`` (ResNet-50 bf16+cl, batch 512: 28,241 against 24,961 img/s,
benchmarks/README.md); this backend's own H200 figures are not measured yet.
"""

from __future__ import annotations

from clsbench.backends.base import BACKENDS
from clsbench.backends.export import Export

#: What this backend adds to every ``export`` build.
FREEZING = {"freezing": True}

#: ``tune`` tries this backend before plain ``export`` (rank 30): on the H100, ResNet-50 bf16+cl at batch 256 ran
#: 22,946 img/s frozen against 21,881 (one call, `run --backend`); fp16+cl at batch 512, 26,652 against 25,661 (two
#: tune calls); on the CPU above 583 against 265. A tune whose budget fits one of the two then measures this one.
TUNE_RANK = 20

BACKENDS.register("export-frozen", Export("export-frozen", FREEZING, tune_rank=TUNE_RANK))
