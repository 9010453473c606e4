"""recall-server: the Chain-of-Recall reference graph server."""

__version__ = "0.1.0"
