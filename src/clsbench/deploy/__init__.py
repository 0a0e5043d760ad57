"""Deploying what was measured: a Triton Inference Server model repository (``clsbench export --triton-repo``).

One module per deployable format registers itself in :data:`FORMATS` under the name of the backend it deploys
(:mod:`.onnx_repo`: ``onnxruntime``; :mod:`.torchscript_repo`: ``torchscript``, legacy); :mod:`.base` holds the
interface, :mod:`.triton_repo` the configuration file and the repository's layout, :mod:`.serve_winner` the best
Server answer of a serve result (``--from``), and :mod:`.export` the procedure the API calls.
"""

from clsbench.deploy.base import FORMATS, DeployFormat, ExportFailedError, format_names, get_format
from clsbench.deploy.export import ExportPlan, RepoOutcome, TritonExportSettings, export_triton_repo, resolve

__all__ = [
    "FORMATS",
    "DeployFormat",
    "ExportFailedError",
    "ExportPlan",
    "RepoOutcome",
    "TritonExportSettings",
    "export_triton_repo",
    "format_names",
    "get_format",
    "resolve",
]
