"""What every page shares (moved from ``pages/_common.py``; split by concern in the next commit)."""
from .cache import *  # noqa: F401,F403
