"""A script that raises while it is imported."""
import torch  # noqa: F401

raise ImportError("no module named 'my_private_lib'")
