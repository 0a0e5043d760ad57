"""Where the gpu pipeline decodes its JPEGs, one module each, registered in :data:`clsbench.data.base.DECODERS`
(``--gpu-decode``): ``nvjpeg`` (the default: nvJPEG on the GPU, a batch per call), ``cpu`` (libjpeg-turbo on a pool
of threads in the training process; the crops go to the GPU in one copy per batch) and ``split`` (each batch shared
between the two at once, the share following their rates)."""
