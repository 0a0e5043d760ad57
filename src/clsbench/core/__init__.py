"""The core: what every other layer may import (options, plans, the registry pattern, the vocabulary)."""
