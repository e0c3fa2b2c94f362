"""The chaos and rollout run (``python tests/chaos/run.py``): faults one at a time under load
from every client generation, and whether each kept its promise."""
