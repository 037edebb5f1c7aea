"""The main run's own workloads (`python -m bench`), one module each, and
what they share (`common`). The workloads that need more of their own
stay beside them in bench/: pods.py, fairness.py, rolling.py and sso.py
(which also runs alone, `python -m bench.sso`).
"""
