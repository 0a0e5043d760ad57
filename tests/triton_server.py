"""A real Triton Inference Server for the tests of ``clsbench.serving.triton_target``, hosted by PyTriton on CPU.

Run it as a script (the fixture in ``tests/triton_fixture.py`` does)::

    python tests/triton_server.py --model-name resnet18 --input-size 64 --statistics open

It serves torchvision's ResNet-18 with seeded random weights (``torch.manual_seed(0)``; nothing is downloaded):
input ``images`` UINT8 ``[3, H, W]``, normalised with ImageNet's mean and std inside the model (as clsbench's own
server does on the device), output ``logits`` FP32 ``[1000]``; Triton's dynamic batcher forms batches of up to
``--max-batch`` with a small queue delay. Once Triton answers it prints one line ``READY grpc=<port> http=<port>``
on stdout, then serves until stdin closes (or reads ``stop``) or SIGTERM / SIGINT arrives, and then leaves PyTriton's
``with Triton(...)`` block normally: a signal that killed this process outright could leave the ``tritonserver``
child running and holding its ports (see shared/FACTS.md), so a caller that must kill it kills its process group.

PyTriton's Python model stub must load this interpreter's own libpython (else it picks up the system's older one
and fails); the script re-executes itself once with ``LD_LIBRARY_PATH`` set to this Python's ``LIBDIR`` when that
is missing.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import sysconfig
import threading
from typing import Any

#: The environment mark that the script has already re-executed itself with LD_LIBRARY_PATH set.
_REEXEC_MARK = "CLSBENCH_TRITON_SERVER_REEXEC"
#: ImageNet mean and std of the RGB channels in 0..255 units (torchvision's classification presets x 255), the same
#: normalisation clsbench.serving.instance applies.
IMAGENET_MEAN_255 = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD_255 = (0.229 * 255, 0.224 * 255, 0.225 * 255)
#: Classes of torchvision's ResNet-18 head.
NUM_CLASSES = 1000


def _ensure_libpython() -> None:
    """Re-execute this script once with LD_LIBRARY_PATH starting with this Python's LIBDIR (see the docstring)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if not libdir or os.environ.get(_REEXEC_MARK) or current.split(":")[0] == libdir:
        return
    env = dict(os.environ, LD_LIBRARY_PATH=f"{libdir}:{current}" if current else libdir, **{_REEXEC_MARK: "1"})
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def free_port() -> int:
    """A TCP port on the loopback address that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-name", default="resnet18", help="the name Triton serves the model under")
    parser.add_argument("--input-size", type=int, default=64, help="the square side H = W of the UINT8 input")
    parser.add_argument("--max-batch", type=int, default=16, help="Triton's max_batch_size for the model")
    parser.add_argument("--max-queue-delay-us", type=int, default=2000,
                        help="the dynamic batcher's max queue delay in microseconds")
    parser.add_argument("--statistics", choices=("open", "restricted"), default="open",
                        help="open: statistics and model-repository answer anyone; restricted: PyTriton's default "
                             "protection, with --access-token as the token")
    parser.add_argument("--access-token", default=None,
                        help="the token of the restricted endpoints (restricted only; default: a random one)")
    parser.add_argument("--grpc-port", type=int, default=0, help="0: a free port")
    parser.add_argument("--http-port", type=int, default=0, help="0: a free port")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the model")
    parser.add_argument("--bad-model", default=None,
                        help="also serve a model of this name whose input is no image (FP32 [10]), for error tests")
    return parser.parse_args(argv)


def build_model(input_size: int, threads: int) -> Any:
    """ResNet-18 with seeded random weights, UINT8 NCHW in, logits out (normalisation inside)."""
    import torch
    import torchvision

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES).eval()
    mean = torch.tensor(IMAGENET_MEAN_255).view(1, 3, 1, 1)
    scale = 1.0 / torch.tensor(IMAGENET_STD_255).view(1, 3, 1, 1)

    def infer(images: Any) -> Any:
        with torch.inference_mode():
            x = torch.from_numpy(images).float().sub_(mean).mul_(scale)
            return net(x).numpy()

    infer(__import__("numpy").zeros((1, 3, input_size, input_size), dtype="uint8"))  # warm up the allocator
    return infer


def serve(args: argparse.Namespace) -> None:
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    model = build_model(args.input_size, args.threads)

    @batch
    def infer_func(images: np.ndarray) -> dict[str, np.ndarray]:
        return {"logits": model(images)}

    grpc_port = args.grpc_port or free_port()
    http_port = args.http_port or free_port()
    config = TritonConfig(grpc_address="127.0.0.1", grpc_port=grpc_port, http_address="127.0.0.1",
                          http_port=http_port, allow_metrics=False, exit_timeout_secs=5)
    if args.statistics == "open":
        security = TritonSecurityConfig(restricted_endpoints=[])
    else:
        security = TritonSecurityConfig(access_token=args.access_token)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def wait_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    with Triton(config=config, security_config=security) as triton:
        triton.bind(
            model_name=args.model_name,
            infer_func=infer_func,
            inputs=[Tensor(name="images", dtype=np.uint8, shape=(3, args.input_size, args.input_size))],
            outputs=[Tensor(name="logits", dtype=np.float32, shape=(NUM_CLASSES,))],
            config=ModelConfig(max_batch_size=args.max_batch,
                               batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)),
            strict=True,
        )
        if args.bad_model:
            @batch
            def vector_func(values: np.ndarray) -> dict[str, np.ndarray]:
                return {"total": values.sum(axis=1, keepdims=True)}

            triton.bind(model_name=args.bad_model, infer_func=vector_func,
                        inputs=[Tensor(name="values", dtype=np.float32, shape=(10,))],
                        outputs=[Tensor(name="total", dtype=np.float32, shape=(1,))],
                        config=ModelConfig(max_batch_size=args.max_batch), strict=True)
        triton.run()
        print(f"READY grpc={grpc_port} http={http_port}", flush=True)
        threading.Thread(target=wait_stdin, name="stdin-watch", daemon=True).start()
        while not stop.wait(0.2):  # a timeout, so the signal handlers run promptly in this (main) thread
            pass
    print("STOPPED", flush=True)


def main() -> None:
    _ensure_libpython()
    serve(parse_args())


if __name__ == "__main__":
    main()
