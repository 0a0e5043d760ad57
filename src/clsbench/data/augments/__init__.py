"""The gpu pipeline's augmentation implementations, one module each, registered in
:data:`clsbench.data.base.AUGMENTS` (``--gpu-augment``): ``batched`` (the default: the whole batch in a few batched
operations, ``torchvision.ops.roi_align``), ``separable`` (the antialiased resize of the whole batch as two batched
matrix products) and ``per-image`` (one antialiased resize per image)."""
