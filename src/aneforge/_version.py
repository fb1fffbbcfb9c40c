"""The package version (its own module, so layers import it without the root package)."""

__version__ = "0.1.0"
