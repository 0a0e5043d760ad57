"""Database dialects of the results store, one module each, registered in
:data:`clsbench.results.store_base.BACKENDS` under their URL scheme (``sqlite``, ``postgresql``)."""
