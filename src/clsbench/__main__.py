"""``python -m clsbench``."""

from clsbench.cli import main

if __name__ == "__main__":
    main()
