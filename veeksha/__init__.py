"""veeksha: benchmark LLM inference servers with realistic session traffic."""

__version__ = "0.1.0"
__all__ = ["__version__"]
